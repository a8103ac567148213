"""Call 79: split the samples of a stage's main K/V loop (the instructions executed once per consumer
warp per step) into phases at its waits. Usage: loop_phases.py source.csv [steps_count]"""
import csv, sys, collections, re
rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i, r in enumerate(rows) if 'Source' in r)
h = rows[hi]; body = [r for r in rows[hi + 1:] if len(r) == len(h)]
c = {n: i for i, n in enumerate(h)}
ex = [int(r[c['Instructions Executed']] or 0) for r in body]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else collections.Counter(e for e in ex if e).most_common(1)[0][0]
idx = [i for i, e in enumerate(ex) if e == steps]
lo, hi_ = idx[0], idx[-1]
reasons = [n for n in h if n.startswith('stall_') and 'Not Issued' not in n]
S = lambda r: float(r[c['Warp Stall Sampling (All Samples)']] or 0)
total_all = sum(S(r) for r in body)
loop = body[lo:hi_ + 1]
total_loop = sum(S(r) for r in loop)
print(f"loop: {hi_ - lo + 1} instructions at addresses {body[lo][0]}..{body[hi_][0]}, executed {steps} times each;"
      f" samples {total_loop:.0f} = {100 * total_loop / total_all:.1f}% of the kernel's {total_all:.0f}")
seg = []; cur = None
def opc(s):
    s = re.sub(r'^\s*@!?U?P(T|\d+)\s+', '', s.strip()); return s.split()[0] if s else ''
for r in loop:
    op = opc(r[c['Source']])
    if cur is None or op.startswith(('WARPGROUP.DEPBAR', 'BAR.SYNC', 'SYNCS.PHASECHK', 'HGMMA')) and not (cur['first'].startswith('HGMMA') and op.startswith('HGMMA')):
        cur = {'first': op, 'src': r[c['Source']].strip(), 'n': 0, 's': 0.0, 'ops': collections.Counter(), 'why': collections.Counter()}
        seg.append(cur)
    cur['n'] += 1; cur['s'] += S(r); cur['ops'][op.split('.')[0]] += 1
    for n in reasons: cur['why'][n] += float(r[c[n]] or 0)
print(f"{'phase starts at':58s} {'instr':>5s} {'samples':>9s} {'% loop':>7s}  top reasons; opcodes")
for g in seg:
    why = ', '.join(f"{k[6:]} {100 * v / max(g['s'], 1):.0f}%" for k, v in g['why'].most_common(3) if v)
    ops = ' '.join(f"{k}{v}" for k, v in g['ops'].most_common(6))
    print(f"{g['src'][:58]:58s} {g['n']:5d} {g['s']:9.0f} {100 * g['s'] / total_loop:6.1f}%  {why}; {ops}")

# The tests of the Python tooling that reads the build and the stage declarations: the structural
# SASS test (tests/check_sass.py), the freshness of the generated docs (tools/gen_docs.py) and the
# docs' coverage of every stage (tests/test_docs_coverage.py). Included from tests/CMakeLists.txt.

find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  # Every stage's declared SASS signature (stages/<track>/*/stage.json), on every architecture built.
  set(sass_args "")
  foreach(stage IN LISTS FA_STAGES)
    list(APPEND sass_args "--stage" "${stage}=$<TARGET_FILE:stage_${stage}>")
  endforeach()
  add_test(NAME test_sass_structure
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_sass.py ${sass_args})
  set_tests_properties(test_sass_structure PROPERTIES LABELS "cpu;sass" SKIP_RETURN_CODE 77)

  # The generated parts of docs/ that need no build (each stage's diffstat against its parent, its
  # results table from the committed CSV, the ceilings, the headline table of docs/performance.md)
  # must match the tree: a stage edit without `python3 tools/gen_docs.py` fails here.
  add_test(NAME docs_generated_sections_fresh
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/gen_docs.py --check
            --sections diff,results,headline,ceilings)
  set_tests_properties(docs_generated_sections_fresh PROPERTIES LABELS "cpu;docs")

  # The SASS tables of docs/stages, regenerated from this build's stage libraries. Skipped (77)
  # without cuobjdump/nvdisasm, or when this build's CUDA compiler is not the one the pages record.
  add_test(NAME docs_sass_sections_fresh
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/gen_docs.py --check --sections sass
            --build-dir ${PROJECT_BINARY_DIR})
  set_tests_properties(docs_sass_sections_fresh PROPERTIES LABELS "cpu;docs;sass" SKIP_RETURN_CODE 77)

  # Every stage has its page, its row in its track's README table and its place in docs/algorithm.md.
  add_test(NAME docs_cover_every_stage
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_docs_coverage.py)
  set_tests_properties(docs_cover_every_stage PROPERTIES LABELS "cpu;docs")

  # common/c_api.h through ctypes, as tools/interleaved.py uses it: the stage list, and the errors
  # (an unknown stage, a call the launcher rejects) that must come back as messages, not crashes.
  add_test(NAME test_c_api
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_c_api.py $<TARGET_FILE:fa_capi>)
  set_tests_properties(test_c_api PROPERTIES LABELS cpu)

  # tools/interleaved.py's launch order (every implementation once a round, each following each
  # other about equally often) and options, without a GPU or PyTorch.
  add_test(NAME test_interleaved
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_interleaved.py)
  set_tests_properties(test_interleaved PROPERTIES LABELS cpu)

  # tools/bench.py's rounds protocol (fa_run checks, tools/interleaved.py times): the plan, the
  # mapping of interleaved.py's rows, the combined status and a whole run with fakes, without a GPU.
  add_test(NAME test_bench_rounds
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_rounds.py)
  set_tests_properties(test_bench_rounds PROPERTIES LABELS cpu)

  # The decoding benchmark (tools/decode_bench.py, tools/decode_csv.py, tools/plot.py --decode): the
  # byte count, the copies that keep K and V cold in L2, the CSV, the options, the dry run, a whole run
  # on a fake PyTorch and the plot, without a GPU. 77 (skipped) only where matplotlib is missing.
  add_test(NAME test_decode_bench
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_decode_bench.py)
  set_tests_properties(test_decode_bench PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)

  # The decoding track's results sections (tools/decode_docs.py, through tools/gen_docs.py): which
  # committed decoding CSV a page shows and its table, on fake CSVs; every decoding page is current.
  add_test(NAME test_decode_docs
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_decode_docs.py)
  set_tests_properties(test_decode_docs PROPERTIES LABELS cpu)

  # The backward benchmark (tools/backward_bench.py): the FLOP count, the CSV and its ratios, the
  # options, the dry run, and a whole run on a fake PyTorch and library (the forward outside every
  # timed region, no time for a failed check), without a GPU.
  add_test(NAME test_backward_bench
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_backward_bench.py)
  set_tests_properties(test_backward_bench PROPERTIES LABELS cpu)

  # tools/schedule_model.py: the static schedules' counts that the pages of hopper_08_causal,
  # hopper_09_three_warpgroups and ampere_17_lpt_order quote.
  add_test(NAME test_schedule_model
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_schedule_model.py)
  set_tests_properties(test_schedule_model PROPERTIES LABELS cpu)

  # No file speaks of how the work was produced instead of the project (tests/test_no_lab_notebook.py).
  add_test(NAME test_no_lab_notebook COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_no_lab_notebook.py)
  set_tests_properties(test_no_lab_notebook PROPERTIES LABELS cpu)
  # The book's order: track folders, numbered without gaps, stage NN's parent NN-1 (tests/test_tracks.py).
  add_test(NAME test_tracks COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_tracks.py)
  set_tests_properties(test_tracks PROPERTIES LABELS cpu)
else()
  message(WARNING "python3 not found: the SASS and docs tests (tests/check_sass.py, tools/gen_docs.py, "
                  "tests/test_docs_coverage.py) are not registered")
endif()

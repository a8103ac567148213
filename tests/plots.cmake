# The plotting script's CPU test (tests/test_plots.py): renders a synthetic results CSV with
# tools/plot.py and rewrites the tracks section of a README copy and the docs/results.md beside it;
# checks the committed README, docs/results.md, plots and stage pages against the committed CSV.
# Included from tests/CMakeLists.txt with include(${CMAKE_CURRENT_SOURCE_DIR}/plots.cmake OPTIONAL).
#
# Without matplotlib the test exits 77 and CTest reports it as skipped (never as passed); without
# any Python 3 interpreter it is registered as a test that reports skipped too.

find_package(Python3 COMPONENTS Interpreter QUIET)

if(Python3_Interpreter_FOUND)
  add_test(NAME plots_render
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_plots.py)
  set_tests_properties(plots_render PROPERTIES
    LABELS cpu
    SKIP_RETURN_CODE 77
    TIMEOUT 300)
  # The README's generated track tables and docs/results.md must be exactly what the CSV the README
  # names gives, and every plot they show must exist.
  add_test(NAME readme_results_match_csv
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/plot.py --check)
  set_tests_properties(readme_results_match_csv PROPERTIES LABELS "cpu;docs")
else()
  add_test(NAME plots_render
           COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: no Python 3 interpreter found, so tools/plot.py cannot be tested")
  set_tests_properties(plots_render PROPERTIES
    LABELS cpu
    SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()

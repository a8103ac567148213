# The tests of the Python tooling that reads the build and the stage declarations: the structural
# SASS test (tools/check_sass.py) and the freshness of the generated docs (tools/gen_docs.py).
# Included from tests/CMakeLists.txt.

find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  set(sass_args "")
  foreach(stage IN LISTS FA_STAGES)
    list(APPEND sass_args "--stage" "${stage}=$<TARGET_FILE:stage_${stage}>")
  endforeach()
  add_test(NAME test_sass_structure
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_sass.py
            --source-dir ${PROJECT_SOURCE_DIR} ${sass_args})
  set_tests_properties(test_sass_structure PROPERTIES LABELS "cpu;sass" SKIP_RETURN_CODE 77)
  # The generated parts of docs/ (stage diffs, results tables from the committed CSV) must match
  # the tree: a stage edit without `python3 tools/gen_docs.py` fails here.
  add_test(NAME docs_generated_sections_fresh
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/gen_docs.py --check)
  set_tests_properties(docs_generated_sections_fresh PROPERTIES LABELS "cpu;docs")
else()
  message(WARNING "python3 not found: the SASS and docs tests (tests/check_sass.py, tools/gen_docs.py) are not registered")
endif()


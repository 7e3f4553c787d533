# `cmake --install BUILD [--prefix DIR]` (and CPack, which installs the same way): the
# `shardguard` binary, libshardguard.so (the C ABI) and its header, a pkg-config file, the
# Python package (ready to import with the system python, and as a pip-installable source
# tree for virtual environments), the systemd units of `shardguard agent` and of a job
# (`shardguard-job@NAME`) with example configs, and the Python examples.
#
# Files that must name the install prefix (the .pc file, the library path the Python package
# loads, the unit's ExecStart) are written at install time by install_generated.cmake, so
# that `--prefix` and CPack's /usr both get their own, without environment variables.
include(GNUInstallDirs)

set(SG_PYTHON_SITE lib/python3/dist-packages)  # Debian's place for pure Python packages
set(SG_PYTHON_SOURCE ${CMAKE_INSTALL_DATADIR}/shardguard/python)
set(SG_EXAMPLES_DIR ${CMAKE_INSTALL_DATADIR}/shardguard/examples)
set(SG_UNIT_DIR lib/systemd/system)

install(TARGETS shardguard RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS shardguard_c LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_SKIP)
install(TARGETS shardguard_c LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_ONLY)
install(FILES ${CMAKE_SOURCE_DIR}/hooks/include/shardguard.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

foreach(dest ${SG_PYTHON_SITE} ${SG_PYTHON_SOURCE})
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/hooks/python/shardguard DESTINATION ${dest}
          FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE
          PATTERN "_install_paths.py" EXCLUDE)
endforeach()
install(FILES ${CMAKE_SOURCE_DIR}/hooks/python/pyproject.toml DESTINATION ${SG_PYTHON_SOURCE})

install(FILES ${CMAKE_SOURCE_DIR}/packaging/agent.toml ${CMAKE_SOURCE_DIR}/packaging/job.toml
        DESTINATION ${SG_EXAMPLES_DIR})
install(FILES ${CMAKE_SOURCE_DIR}/examples/python/ddp_trainer.py
              ${CMAKE_SOURCE_DIR}/examples/python/torch_trainer.py
              ${CMAKE_SOURCE_DIR}/examples/python/numpy_trainer.py
              ${CMAKE_SOURCE_DIR}/examples/python/README.md
        DESTINATION ${SG_EXAMPLES_DIR}/python)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")

# The install-time part: configured now with the layout, run with the prefix of the install.
set(SG_SOVERSION_FILE libshardguard.so.${SG_C_ABI_SOVERSION})
configure_file(${CMAKE_CURRENT_LIST_DIR}/install_generated.cmake.in
               ${CMAKE_BINARY_DIR}/install_generated.cmake @ONLY)
install(SCRIPT ${CMAKE_BINARY_DIR}/install_generated.cmake)

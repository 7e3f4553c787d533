# `cpack -G DEB` in the build directory (after building shardguard and shardguard_c): a
# Debian package of what cmake/install.cmake installs, under /usr. Shared-library
# dependencies come from dpkg-shlibdeps; the Python package needs python3 and numpy (torch
# is recommended, not required). Installing it (dpkg -i or apt install ./shardguard_*.deb)
# puts `shardguard` on PATH, makes `import shardguard` work with /usr/bin/python3, and
# adds the shardguard-agent unit (not enabled).
#
# `cmake --install` and CPack install what is built; they do not build everything first
# (the tests and benchmarks are not part of the package).
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME shardguard)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "shardguard maintainers <shardguard@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "preemption-aware supervisor and sharded checkpoints for long training runs")
set(CPACK_PACKAGE_DESCRIPTION
    "shardguard wraps a training command, watches for preemption notices (AWS, GCP, Azure, \
Slurm, Kubernetes, an operator's drain), has the job write an emergency checkpoint before \
the deadline and relaunches it from the newest complete, verified checkpoint. Includes the \
C library (libshardguard), the Python package and the node agent's systemd unit.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3 (>= 3.9), python3-numpy")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-torch")
# ldconfig after installing or removing the library.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_SOURCE_DIR}/packaging/deb/triggers)
include(CPack)

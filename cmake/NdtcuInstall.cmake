# install(EXPORT) + package config: find_package(ndtcu) then target_link_libraries(app ndtcu::ndtcu);
# trajectories, ATE/RPE and scan sequences come as ndtcu::eval and the simulator as ndtcu::sim
# (synthetic worlds for tests and evaluation), separate libraries that a localization stack
# need not link; the rosbag reader comes as ndtcu::rosbag.
include(CMakePackageConfigHelpers)

set(NDTCU_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ndtcu)
install(TARGETS ndtcu ndtcu_eval ndtcu_sim ndtcu_rosbag EXPORT ndtcuTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ndtcu_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ndtcu DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/ndtcu/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ndtcu)
install(EXPORT ndtcuTargets NAMESPACE ndtcu:: DESTINATION ${NDTCU_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ndtcu-config.cmake.in
  ${PROJECT_BINARY_DIR}/ndtcu-config.cmake INSTALL_DESTINATION ${NDTCU_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ndtcu-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ndtcu-config.cmake ${PROJECT_BINARY_DIR}/ndtcu-config-version.cmake
        DESTINATION ${NDTCU_CMAKE_DIR})

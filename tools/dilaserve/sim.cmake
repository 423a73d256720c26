# `dilaserve sim` (tools/dilaserve/cmd_sim.cpp) needs the simulator and the policies.
if(NOT TARGET dls_sim)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tools/sim ${PROJECT_BINARY_DIR}/tools/sim)
endif()
target_link_libraries(dilaserve PRIVATE dls_sim dls_policies)

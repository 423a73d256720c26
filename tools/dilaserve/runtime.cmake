# Libraries behind the runtime's subcommands (up, down, start, status, actors, submit,
# reconfigure, bench-runtime).
target_sources(dilaserve PRIVATE ${CMAKE_CURRENT_LIST_DIR}/up_profile.cpp)
target_link_libraries(dilaserve PRIVATE dls_actors dls_runtime dls_gpu dls_caf yaml-cpp)

# The embedding example (docs/embedding.md): a separate CAF program on the public header.
add_executable(embed_client ${PROJECT_SOURCE_DIR}/examples/embed_client.cpp)
target_link_libraries(embed_client PRIVATE dls_actors dls_runtime dls_caf)

# Libraries behind the runtime's subcommands (up, down, start, status, actors, submit,
# reconfigure, bench-runtime).
target_link_libraries(dilaserve PRIVATE dls_actors dls_runtime dls_caf)

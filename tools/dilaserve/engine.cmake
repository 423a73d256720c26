# Engine commands (generate, eval, bench-engine) link the engine library.
target_sources(dilaserve PRIVATE ${CMAKE_CURRENT_LIST_DIR}/decode_options.cpp)
target_link_libraries(dilaserve PRIVATE dls_gpu)

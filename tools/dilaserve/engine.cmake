# Engine commands (generate, eval, bench-engine) link the engine library.
target_sources(dilaserve PRIVATE ${CMAKE_CURRENT_LIST_DIR}/decode_options.cpp)
target_link_libraries(dilaserve PRIVATE dls_gpu)
# `--device cuda` when the CUDA backend was built (it brings DLS_HAVE_CUDA=1).
if(TARGET dls_gpu_cuda)
  target_link_libraries(dilaserve PRIVATE dls_gpu_cuda)
endif()

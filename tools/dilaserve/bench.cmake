# `dilaserve bench` (cmd_bench.cpp): the live trace replay's parts.
target_sources(dilaserve PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bench_workload.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_cluster.cpp
               ${CMAKE_CURRENT_LIST_DIR}/bench_replay.cpp ${CMAKE_CURRENT_LIST_DIR}/random_model.cpp
               ${CMAKE_CURRENT_LIST_DIR}/bench_live_migration.cpp
               ${CMAKE_CURRENT_LIST_DIR}/cluster_file_copy.cpp)

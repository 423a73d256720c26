# `bench-http` drives the gateway with cpp-httplib's client.
target_link_libraries(dilaserve PRIVATE PkgConfig::HTTPLIB)

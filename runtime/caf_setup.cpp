#include "runtime/caf_setup.hpp"

#include "runtime/messages.hpp"

#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/sec.hpp>

#include <sstream>
#include <stdexcept>

namespace dls::runtime {

void configure_caf(caf::actor_system_config& cfg, const std::vector<std::string>& args, bool with_openssl) {
  cfg.load<caf::io::middleman>();
  if (with_openssl) cfg.load<caf::openssl::manager>();
  add_message_types(cfg);
  std::vector<std::string> all{"--scheduler.policy=sharing", "--scheduler.max-threads=2",
                               "--middleman.heartbeat-interval=200ms",
                               "--middleman.connection-timeout=15s"};
  all.insert(all.end(), args.begin(), args.end());
  std::istringstream no_ini;  // never read caf-application.ini from the working directory
  if (auto err = cfg.parse(all, no_ini))
    throw std::runtime_error("invalid CAF setting: " + caf::to_string(err));
}

}  // namespace dls::runtime

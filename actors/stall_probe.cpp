#include "actors/stall_probe.hpp"

#include "runtime/log.hpp"

#include <caf/all.hpp>

#include <chrono>

namespace dls::actors {

namespace {

using tick_atom = caf::atom_constant<caf::atom("stall_tick")>;
using clock_type = std::chrono::steady_clock;

// Wake-ups every 100 ms: fine enough to see sub-second stalls, ten cheap messages a second.
constexpr auto interval = std::chrono::milliseconds(100);
// A wake-up later than this is logged: 0.5 s of a whole scheduler doing nothing else is far
// beyond any actor's normal turn, and a fifth of a 2.5 s handshake or heartbeat budget.
constexpr auto reported_lag = std::chrono::milliseconds(500);

struct probe_state {
  clock_type::time_point due;
  static inline const char* name = "dls.stall_probe";
};

caf::behavior stall_probe(caf::stateful_actor<probe_state>* self, std::string who) {
  self->state.due = clock_type::now() + interval;
  self->delayed_send(self, interval, tick_atom::value);
  return {
      [=](tick_atom) {
        const auto now = clock_type::now();
        const auto lag = now - self->state.due;
        if (lag > reported_lag)
          runtime::log_line(who, "scheduler stalled: a wake-up due " +
                                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(lag).count()) +
                                     " ms earlier came only now (every CAF thread of this process was busy or blocked)");
        self->state.due = now + interval;
        self->delayed_send(self, interval, tick_atom::value);
      },
  };
}

}  // namespace

void spawn_stall_probe(caf::actor_system& sys, const std::string& who) {
  // Hidden: it must not keep the system alive at shutdown, nor show in `actors`.
  sys.spawn<caf::hidden>(stall_probe, who);
}

}  // namespace dls::actors

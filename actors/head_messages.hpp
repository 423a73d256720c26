#pragma once
// Messages between actors of the head process only (request actors, supervisor, core): they
// never cross the wire, so they are not registered for serialization.
#include <caf/atom.hpp>

namespace dls::actors {

/// (request_row_atom, request id, state, details JSON, answered): a request actor's directory
/// row, created by its first update.
using request_row_atom = caf::atom_constant<caf::atom("reqrow")>;

}  // namespace dls::actors

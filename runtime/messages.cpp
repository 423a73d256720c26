#include "runtime/messages.hpp"

#include "runtime/group_load.hpp"

namespace dls::runtime {

void add_message_types(caf::actor_system_config& cfg) {
  // The names are the wire identity of each type: never rename one without bumping
  // every node of a cluster at once.
  cfg.add_message_type<node_hello>("dls_node_hello")
      .add_message_type<join_reply>("dls_join_reply")
      .add_message_type<actor_info>("dls_actor_info")
      .add_message_type<group_info>("dls_group_info")
      .add_message_type<submit_spec>("dls_submit_spec")
      .add_message_type<block_chunk>("dls_block_chunk")
      .add_message_type<answer>("dls_answer")
      .add_message_type<work_item>("dls_work_item")
      .add_message_type<run_result>("dls_run_result")
      .add_message_type<regroup_spec>("dls_regroup_spec")
      .add_message_type<request_progress>("dls_request_progress")
      .add_message_type<migration_order>("dls_migration_order")
      .add_message_type<migration_handoff>("dls_migration_handoff")
      .add_message_type<request_report>("dls_request_report")
      .add_message_type<group_report>("dls_group_report")
      .add_message_type<client_reply>("dls_client_reply")
      .add_message_type<head_actor>("dls_head_actor")
      .add_message_type<gate_actor>("dls_gate_actor")
      .add_message_type<step_histogram>("dls_step_histogram")
      .add_message_type<group_load>("dls_group_load")
      .add_message_type<std::vector<double>>("dls_doubles");  // provision: arrival triples
}

}  // namespace dls::runtime

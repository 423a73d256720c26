// Bounded head memory: finished requests leave the actor directory after the configured
// retention (count and age), and `status` still counts every request the head served.
#define BOOST_TEST_MODULE test_runtime_retention
#include <boost/test/unit_test.hpp>

#include "actors/directory.hpp"
#include "cluster_fixture.hpp"

#include <chrono>

namespace rt = dls::runtime;
using dls::actors::directory;
using dls::test::cluster;
using json = nlohmann::json;

namespace {

// Rows as request actors make them: created by the first update, keyed by request id (here the
// row ids and the request ids are the same sequence, as in a fresh head with no other rows).
uint64_t add_request(directory& d, uint64_t request_id) {
  dls::actors::request_details q;
  q.status = "QUEUED";
  return d.update_request(request_id, "ALIVE", q, false, 1);
}

void end_request(directory& d, uint64_t request_id, const std::string& status, directory::clock::time_point t) {
  dls::actors::request_details q;
  q.status = status;
  d.update_request(request_id, "DEAD", q, status == "FINISHED", 1, t);
}

int request_rows(const json& actors) {
  int n = 0;
  for (auto& a : actors) n += a["kind"] == "request";
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(count_retention_keeps_the_newest_finished_rows_and_every_count) {
  rt::directory_retention r;
  r.finished_requests = 3;
  r.finished_age_s = 0;
  directory d(r);
  auto node = d.add({0, "node", "node0", "node0", 1, "ALIVE", 0, "{}"});
  auto t = directory::clock::now();
  std::vector<uint64_t> ids;  // row ids of requests 1..10
  for (uint64_t i = 1; i <= 10; ++i) ids.push_back(add_request(d, i));
  for (uint64_t i = 1; i <= 8; ++i) end_request(d, i, i % 4 == 0 ? "FAILED" : "FINISHED", t);
  auto c = d.requests();
  BOOST_TEST(c.finished == 6u);
  BOOST_TEST(c.failed == 2u);
  BOOST_TEST(c.in_flight == 2u);
  BOOST_TEST(c.retained == 3u);
  BOOST_TEST(d.size() == 1u + 2u + 3u);  // the node, two running requests, three retained
  BOOST_TEST(d.find(ids[4]) == nullptr);
  BOOST_TEST(d.find(ids[5]) != nullptr);  // the newest three finished stay
  BOOST_TEST(d.find(ids[9]) != nullptr);  // running ones are never evicted
  BOOST_TEST(d.find(node) != nullptr);
  // A second end of the same request is not counted again, nor does it make a row; unknown
  // row ids are ignored.
  end_request(d, 8, "FINISHED", t);
  BOOST_TEST(d.size() == 1u + 2u + 3u);
  d.update(ids[0], "DEAD", "{}", t);
  BOOST_TEST(d.requests().finished == 6u);
  BOOST_TEST(d.requests().failed == 2u);
}

BOOST_AUTO_TEST_CASE(age_retention_expires_old_finished_rows) {
  rt::directory_retention r;
  r.finished_requests = 100;
  r.finished_age_s = 60;
  directory d(r);
  auto t0 = directory::clock::now();
  auto a = add_request(d, 1), b = add_request(d, 2), c = add_request(d, 3);
  end_request(d, 1, "FINISHED", t0);
  end_request(d, 2, "FINISHED", t0 + std::chrono::seconds(30));
  BOOST_TEST(d.expire(t0 + std::chrono::seconds(59)) == 0u);
  BOOST_TEST(d.expire(t0 + std::chrono::seconds(61)) == 1u);
  BOOST_TEST(d.find(a) == nullptr);
  BOOST_TEST(d.find(b) != nullptr);
  BOOST_TEST(d.expire(t0 + std::chrono::hours(1)) == 1u);
  BOOST_TEST(d.find(c) != nullptr);  // still running
  BOOST_TEST(d.requests().finished == 2u);
  BOOST_TEST(d.requests().retained == 0u);
}

// A TP group's row keeps its newest load report typed and lists it as JSON with where the group
// runs; the row as registered (before any report) keeps its registration details.
BOOST_AUTO_TEST_CASE(a_group_row_lists_its_newest_load_report_and_where_it_runs) {
  directory d;
  const auto id = d.add({0, "tp_group", "node0-g0", "node0", 1, "ALIVE", 0, R"({"degree":2,"queue":0})"});
  BOOST_TEST(d.group_of(id) == nullptr);
  BOOST_TEST(json::parse(d.list().at(0).details)["degree"] == 2);
  for (uint64_t steps : {3u, 7u}) {
    dls::actors::group_details g;
    g.load.steps = steps;
    g.load.queued = 4;
    g.degree = 2;
    g.devices = {0, 1};
    g.refused_at_placement = 1;
    d.update_group(id, g);
  }
  d.update_group(id + 1, {});  // no such row: ignored
  BOOST_REQUIRE(d.group_of(id) != nullptr);
  BOOST_TEST(d.group_of(id + 1) == nullptr);
  BOOST_TEST(d.find(id)->details.empty());
  auto shown = json::parse(d.list().at(0).details);
  BOOST_TEST(shown["steps"] == 7);
  BOOST_TEST(shown["queue"] == 4);
  BOOST_TEST(shown["degree"] == 2);
  BOOST_TEST(shown["devices"] == json::array({0, 1}));
  BOOST_TEST(shown["refused_at_placement"] == 1);
  BOOST_TEST(d.list().size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_cluster_keeps_at_most_the_retained_rows_and_counts_everything) {
  constexpr int keep = 5, served = 30;
  cluster c("local.yaml", 0, "retention: {finished_requests: 5, finished_age_s: 0}\n");
  auto problems = dls::test::eval_problems(served);
  BOOST_REQUIRE_EQUAL(problems.size(), static_cast<std::size_t>(served));
  auto prompts = dls::test::write_prompts(c.scratch(), problems);
  auto r = c.cli({"submit", "--file", prompts, "--json", "--timeout", "120"});
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err + r.out);
  BOOST_TEST(json::parse(r.out)["summary"]["ok"].get<int>() == served);
  // The last rows reach the directory through messages; poll until they have.
  BOOST_TEST(dls::test::eventually(10, [&] {
    auto s = c.json_cli({"status"});
    return s["requests"]["finished"].get<int>() == served;
  }));
  auto status = c.json_cli({"status"});
  BOOST_TEST(status["requests"]["finished"].get<int>() == served);
  BOOST_TEST(status["requests"]["failed"].get<int>() == 0);
  BOOST_TEST(status["requests"]["in_flight"].get<int>() == 0);
  BOOST_TEST(status["requests"]["retained"].get<int>() == keep);
  auto actors = c.json_cli({"actors"});
  BOOST_TEST(request_rows(actors) == keep);
  for (auto& a : actors)
    if (a["kind"] == "request") BOOST_TEST(a["state"] == "DEAD");  // kept rows are finished ones
  // And the cluster serves on.
  auto one = c.cli({"submit", "--prompt", problems[0].prompt});
  BOOST_TEST(one.rc == 0, one.err);
  BOOST_TEST(dls::test::eventually(10, [&] { return c.json_cli({"status"})["requests"]["finished"] == served + 1; }));
  BOOST_TEST(request_rows(c.json_cli({"actors"})) == keep);
}

BOOST_AUTO_TEST_CASE(a_cluster_expires_finished_rows_by_age) {
  cluster c("local.yaml", 0, "retention: {finished_requests: 100, finished_age_s: 1}\n");
  auto problems = dls::test::eval_problems(3);
  auto r = c.cli({"submit", "--file", dls::test::write_prompts(c.scratch(), problems), "--timeout", "120"});
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err + r.out);
  // Rows leave on the head's periodic check once older than 1 s.
  BOOST_TEST(dls::test::eventually(15, [&] { return request_rows(c.json_cli({"actors"})) == 0; }));
  auto status = c.json_cli({"status"});
  BOOST_TEST(status["requests"]["finished"].get<int>() == 3);
  BOOST_TEST(status["requests"]["retained"].get<int>() == 0);
}

// The /dashboard page in headless Chromium against a live cluster: it loads without a
// key, polls the data route with the key from its URL fragment, and renders the nodes,
// groups and both plots with data; the test saves a screenshot next to the binary.
#define BOOST_TEST_MODULE http_dashboard
#include "http_support.hpp"

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <regex>

using namespace dls::test;
using json = nlohmann::json;

namespace {

// Headless Chromium as root needs --no-sandbox; the virtual time budget lets the page's
// polling timers run several times before the DOM is taken.
std::vector<std::string> chromium(const http_cluster& c, const std::string& action) {
  return {"timeout",   "120", "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
          "--virtual-time-budget=5000", action, c.url("/dashboard#key=" + api_key())};
}

int attribute(const std::string& dom, const std::string& id, const std::string& name) {
  std::smatch m;
  std::regex re("id=\"" + id + "\"[^>]*" + name + "=\"([0-9]+)\"");
  return std::regex_search(dom, m, re) ? std::stoi(m[1]) : -1;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_dashboard_renders_the_cluster_and_its_plots) {
  http_cluster c;
  BOOST_TEST(c.call("GET", "/dashboard", "", false).status == 200);
  BOOST_TEST(c.call("GET", "/v1/dashboard/data", "", false).status == 401);
  auto p = eval_problems(1)[0];
  for (int i = 0; i < 10; ++i) {
    auto r = c.call("POST", "/v1/completions",
                    json{{"model", "tiny-llada"}, {"prompt", p.prompt}, {"gen_length", p.gen_length}, {"slo_ms", 60000}}
                        .dump());
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
  }
  auto data = json::parse(c.call("GET", "/v1/dashboard/data").body);
  BOOST_TEST(data["series"].size() >= 1u);
  BOOST_TEST(data["status"]["nodes"][0]["name"] == "node0");

  std::string dom;
  int rc = run_program(chromium(c, "--dump-dom"), dom);
  BOOST_TEST_REQUIRE(rc == 0, dom.substr(0, 2000));
  BOOST_TEST(dom.find("cluster 'local'") != std::string::npos);
  BOOST_TEST(dom.find(">node0<") != std::string::npos);
  BOOST_TEST(dom.find(">node0/g0<") != std::string::npos);
  BOOST_TEST(dom.find("class=\"ALIVE\"") != std::string::npos);
  BOOST_TEST(std::regex_search(dom, std::regex("data-polls=\"[1-9][0-9]*\"")));
  BOOST_TEST(attribute(dom, "attainment", "data-points") > 0);
  BOOST_TEST(attribute(dom, "latency", "data-points") > 0);
  BOOST_TEST(attribute(dom, "layout", "data-points") > 0);

  auto shot = std::string(DLS_BINARY_DIR) + "/tests/http/dashboard.png";
  std::filesystem::remove(shot);
  std::string out;
  BOOST_TEST(run_program(chromium(c, "--screenshot=" + shot), out) == 0, out);
  BOOST_TEST(std::filesystem::exists(shot));
  BOOST_TEST(std::filesystem::file_size(shot) > 10000u, "a blank page is smaller");
  BOOST_TEST_MESSAGE("screenshot: " << shot);
}

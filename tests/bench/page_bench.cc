// The web inspector's time to first heatmap, as a user meets it: headless
// Chromium (Debian's, driven through chromedriver's WebDriver API) opens
// the heatmap view of a demo tensor by URL on a real tensormorphd, and the
// page's own mark `tm-heatmap-drawn` (performance.mark, set when the first
// heatmap is on the canvas) is read back. The baseline, in the same run, is
// the one request the heatmap needs (POST /v1/GetHeatmap with the cells the
// page asked for, in the binary form the page asks for) made directly over
// HTTP: the ratio is what the page adds
// around it (loading itself, its other calls, drawing).
//   build/tests/bench/page_bench      (needs chromium and chromium-driver)
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/demo_checkpoint.h"
#include "tests/support/process.h"

namespace tensormorph {
namespace {

using Json = nlohmann::json;

constexpr char kChromium[] = "/usr/bin/chromium";
constexpr char kChromedriver[] = "/usr/bin/chromedriver";
constexpr char kTensor[] = "blk.0.attn_q.weight";
constexpr char kCheckpoint[] = "model-q4_k_m.gguf";

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// chromedriver as a child process, with one headless Chromium session.
class Browser {
 public:
  bool Start(std::string* error) {
    if (::access(kChromedriver, X_OK) != 0 || ::access(kChromium, X_OK) != 0) {
      *error =
          "needs /usr/bin/chromium and /usr/bin/chromedriver "
          "(deploy/install_deps.sh --tests)";
      return false;
    }
    port_ = FreePort();
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = "--port=" + std::to_string(port_);
      ::execl(kChromedriver, kChromedriver, port.c_str(), "--log-level=OFF",
              nullptr);
      ::_exit(127);
    }
    driver_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    driver_->set_read_timeout(60, 0);
    for (int i = 0; i < 100; ++i) {  // chromedriver takes a moment to listen
      httplib::Result r = driver_->Get("/status");
      if (r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const Json caps = {
        {"capabilities",
         {{"alwaysMatch",
           {{"browserName", "chrome"},
            {"goog:chromeOptions",
             {{"binary", kChromium},
              {"args",
               {"--headless=new", "--no-sandbox", "--disable-gpu",
                "--window-size=1400,900"}}}}}}}}};
    httplib::Result r =
        driver_->Post("/session", caps.dump(), "application/json");
    if (!r || r->status != 200) {
      *error = "chromedriver refused a session: " + (r ? r->body : "no answer");
      return false;
    }
    session_ = Json::parse(r->body)["value"]["sessionId"].get<std::string>();
    return true;
  }

  bool Navigate(const std::string& url) {
    httplib::Result r = driver_->Post(Path("/url"), Json{{"url", url}}.dump(),
                                      "application/json");
    return r && r->status == 200;
  }

  Json Execute(const std::string& script) {
    httplib::Result r =
        driver_->Post(Path("/execute/sync"),
                      Json{{"script", script}, {"args", Json::array()}}.dump(),
                      "application/json");
    if (!r || r->status != 200) return nullptr;
    return Json::parse(r->body)["value"];
  }

  ~Browser() {
    if (!session_.empty()) driver_->Delete(Path(""));
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  std::string Path(const std::string& rest) const {
    return "/session/" + session_ + rest;
  }
  int port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<httplib::Client> driver_;
  std::string session_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Opens the heatmap view by URL and waits for the page's mark; returns its
// time since navigation started (ms), and the cells the page asked for.
bool TimeToFirstHeatmap(Browser& b, const std::string& url, double* ms,
                        std::string* cells) {
  if (!b.Navigate("about:blank") || !b.Navigate(url)) return false;
  for (int i = 0; i < 600; ++i) {
    Json v = b.Execute(
        "const m = performance.getEntriesByName('tm-heatmap-drawn');"
        "const e = document.querySelector('[data-cells]');"
        "return m.length ? [m[0].startTime, e ? e.dataset.cells : ''] : null;");
    if (v.is_array()) {
      *ms = v[0].get<double>();
      *cells = v[1].get<std::string>();
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void BM_PageTimeToFirstHeatmap(benchmark::State& state) {
  testing::ServerProcess server({testing::DemoDir()},
                                {"--http-listen", "127.0.0.1:0"});
  Browser browser;
  std::string error;
  if (!browser.Start(&error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  const std::string base =
      "http://127.0.0.1:" + std::to_string(server.http_port()) + "/";
  const std::string url = base + "?checkpoint=" + kCheckpoint +
                          "&tensor=" + kTensor + "&view=heatmap";
  std::vector<double> page_ms, request_ms;
  double cold_ms = 0;
  for (auto _ : state) {
    for (int round = 0; round < 6; ++round) {
      double ms = 0;
      std::string cells;
      if (!TimeToFirstHeatmap(browser, url, &ms, &cells)) {
        state.SkipWithError("the page never marked tm-heatmap-drawn");
        return;
      }
      if (round == 0) {
        cold_ms = ms;  // nothing cached yet
        continue;
      }
      page_ms.push_back(ms);
      // The page's own request, alone: its cells, read back from the page.
      const size_t x = cells.find('x');
      const Json body = {{"checkpoint", kCheckpoint},
                         {"tensor", kTensor},
                         {"mode", "HEATMAP_MODE_MEAN"},
                         {"height", std::stoi(cells.substr(0, x))},
                         {"width", std::stoi(cells.substr(x + 1))}};
      httplib::Client http("127.0.0.1", server.http_port());
      const auto t0 = std::chrono::steady_clock::now();
      // In the binary form the page asks for (docs/http.md).
      httplib::Result r =
          http.Post("/v1/GetHeatmap", {{"Accept", "application/octet-stream"}},
                    body.dump(), "application/json");
      request_ms.push_back(std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - t0)
                               .count());
      if (!r || r->status != 200) {
        state.SkipWithError("POST /v1/GetHeatmap failed");
        return;
      }
    }
  }
  const double page = Median(page_ms), request = Median(request_ms);
  state.counters["first_load_ms"] = cold_ms;
  state.counters["page_ms"] = page;
  state.counters["request_alone_ms"] = request;
  state.counters["page_vs_request"] = page / request;
}

BENCHMARK(BM_PageTimeToFirstHeatmap)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();

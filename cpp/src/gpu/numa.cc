#include "chute/gpu/numa.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <sstream>
#include <thread>

#include "chute/base/thread.h"

namespace chute {
namespace {
std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}
}  // namespace

std::optional<std::vector<int>> parse_cpulist(std::string_view text) {
  text = trim(text);
  std::vector<int> cpus;
  if (text.empty()) return cpus;  // a node without CPUs (memory-only)
  constexpr int kMaxCpu = 1 << 16;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t dash = item.find('-');
    auto lo = parse_int(item.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : parse_int(item.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi >= kMaxCpu) return std::nullopt;
    for (int c = *lo; c <= *hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string normalize_pci_bus_id(std::string_view id) {
  id = trim(id);
  // domain:bus:device.function, hex; the domain may have 4 or 8 digits.
  const size_t c1 = id.find(':'), c2 = id.find(':', c1 + 1), dot = id.find('.', c2 + 1);
  if (c1 == std::string_view::npos || c2 == std::string_view::npos || dot == std::string_view::npos) return {};
  std::string_view domain = id.substr(0, c1);
  if (domain.size() == 8 && domain.substr(0, 4) == "0000") domain.remove_prefix(4);
  std::string out = std::string(domain) + std::string(id.substr(c1));
  if (domain.size() != 4 || c2 - c1 != 3 || dot - c2 != 3 || id.size() - dot != 2) return {};
  for (char& ch : out) {
    if (ch == ':' || ch == '.') continue;
    if (!std::isxdigit(static_cast<unsigned char>(ch))) return {};
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return out;
}

int pci_numa_node(const std::string& sysfs_root, std::string_view bus_id) {
  const std::string id = normalize_pci_bus_id(bus_id);
  if (id.empty()) return -1;
  auto text = read_file(sysfs_root + "/bus/pci/devices/" + id + "/numa_node");
  if (!text) return -1;
  auto node = parse_int(trim(*text));
  return node && *node >= 0 ? *node : -1;
}

std::vector<int> numa_node_cpus(const std::string& sysfs_root, int node) {
  if (node < 0) return {};
  auto text = read_file(sysfs_root + "/devices/system/node/node" + std::to_string(node) + "/cpulist");
  if (!text) return {};
  return parse_cpulist(*text).value_or(std::vector<int>{});
}

std::vector<int> pci_local_cpus(const std::string& sysfs_root, std::string_view bus_id) {
  std::vector<int> cpus = numa_node_cpus(sysfs_root, pci_numa_node(sysfs_root, bus_id));
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return {};
  std::erase_if(cpus, [&](int c) { return c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed); });
  return cpus;
}

void run_on_cpus(const std::vector<int>& cpus, const std::function<void()>& fn) {
  if (cpus.empty()) return fn();
  Result<std::thread> t = start_thread("chute-numa", [&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus)
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
    fn();
  });
  if (!t.is_ok()) return fn();  // placement is best effort; a thread limit is for the caller's own threads to meet
  t->join();
}

}  // namespace chute

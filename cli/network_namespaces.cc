#include "cli/network_namespaces.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/run_command.h"

namespace baton::cli {
namespace {

constexpr char kSubnetPrefix[] = "10.213";  // 10.213.N.0/24, one slot per cluster
constexpr char kLockPath[] = "/run/lock/baton-netns.lock";

absl::Status Ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  return RunCommand(args).status();
}

absl::Status IpIn(const std::string& ns, std::vector<std::string> args) {
  args.insert(args.begin(), {"ip", "-n", ns});
  return RunCommand(args).status();
}

absl::Status TcIn(const std::string& ns, std::vector<std::string> args) {
  args.insert(args.begin(), {"ip", "netns", "exec", ns, "tc"});
  return RunCommand(args).status();
}

void KillProcessesIn(const std::string& ns) {
  absl::StatusOr<std::string> pids = RunCommand({"ip", "netns", "pids", ns});
  if (!pids.ok()) return;
  for (absl::string_view word : absl::StrSplit(*pids, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(word, &pid) && pid > 0) kill(pid, SIGKILL);
  }
}

// Deletes namespaces of harnesses / clusters whose process is gone.
void SweepStale() {
  absl::StatusOr<std::string> list = RunCommand({"ip", "netns", "list"});
  if (!list.ok()) return;
  const std::regex name(R"(baton-(\d+)-[0-9a-f]+-[pd])");
  for (absl::string_view line : absl::StrSplit(*list, '\n', absl::SkipEmpty())) {
    const std::string ns(line.substr(0, line.find(' ')));
    std::smatch m;
    int pid = 0;
    if (!std::regex_match(ns, m, name) || !absl::SimpleAtoi(m[1].str(), &pid)) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    KillProcessesIn(ns);
    (void)Ip({"netns", "del", ns});
  }
}

// Slots N whose 10.213.N.x appears among the root namespace's addresses and routes.
absl::StatusOr<std::set<int>> UsedSlots() {
  absl::StatusOr<std::string> addrs = RunCommand({"ip", "-4", "-o", "addr", "show"});
  if (!addrs.ok()) return addrs.status();
  absl::StatusOr<std::string> routes = RunCommand({"ip", "-4", "route", "show"});
  if (!routes.ok()) return routes.status();
  const std::string text = *addrs + *routes;
  const std::regex in_prefix(absl::StrCat(R"(\b10\.213\.(\d+)\.)"));
  std::set<int> used;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), in_prefix);
       it != std::sregex_iterator(); ++it) {
    used.insert(std::stoi((*it)[1].str()));
  }
  return used;
}

// An exclusive flock on kLockPath (shared with the Python harness) until destroyed.
class SlotLock {
 public:
  SlotLock() : fd_(open(kLockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0) flock(fd_, LOCK_EX);
  }
  ~SlotLock() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  int fd_;
};

}  // namespace

absl::Status NetworkNamespacesAvailable() {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "emulated links need root (network namespaces: ip netns add, ip link, tc)");
  }
  const std::string probe = absl::StrFormat("baton-probe-%d-%08x", getpid(), std::random_device{}());
  if (absl::Status s = Ip({"netns", "add", probe}); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot make network namespaces here: ",
                                                      s.message()));
  }
  (void)Ip({"netns", "del", probe});
  return absl::OkStatus();
}

PdNamespaces::PdNamespaces()
    : tag_(absl::StrFormat("%06x", std::random_device{}() & 0xffffff)),
      ns_prefill_(absl::StrCat("baton-", getpid(), "-", tag_, "-p")),
      ns_decode_(absl::StrCat("baton-", getpid(), "-", tag_, "-d")) {}

std::string PdNamespaces::Address(int host) const {
  return absl::StrCat(kSubnetPrefix, ".", slot_, ".", host);
}

std::vector<std::string> PdNamespaces::ExecPrefix(const std::string& ns) {
  std::string ip = "/usr/sbin/ip";  // ChildProcess execs a path, not a name
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(path, X_OK) == 0) {
      ip = path;
      break;
    }
  }
  return {ip, "netns", "exec", ns};
}

absl::StatusOr<std::unique_ptr<PdNamespaces>> PdNamespaces::Create(const LinkSpec& link) {
  if (absl::Status s = NetworkNamespacesAvailable(); !s.ok()) return s;
  std::unique_ptr<PdNamespaces> n(new PdNamespaces());
  {
    SlotLock lock;  // until the addresses exist, so that parallel clusters get distinct slots
    SweepStale();
    absl::StatusOr<std::set<int>> used = UsedSlots();
    if (!used.ok()) return used.status();
    std::vector<int> free;
    for (int i = 0; i < 256; ++i) {
      if (!used->contains(i)) free.push_back(i);
    }
    if (free.empty()) {
      return absl::ResourceExhaustedError("no free 10.213.N.0/24 slot for the namespaces' links");
    }
    n->slot_ = free[std::random_device{}() % free.size()];
    if (absl::Status s = n->Build(); !s.ok()) return s;  // the destructor removes the rest
  }
  if (absl::Status s = n->Shape(link); !s.ok()) return s;
  return n;
}

absl::Status PdNamespaces::Build() {
  const std::string rp = absl::StrCat("bt", tag_, "rp"), rP = absl::StrCat("bt", tag_, "rP");
  const std::string rd = absl::StrCat("bt", tag_, "rd"), rD = absl::StrCat("bt", tag_, "rD");
  const std::string pP = absl::StrCat("bt", tag_, "pP"), pD = absl::StrCat("bt", tag_, "pD");
  const std::string& p = ns_prefill_;
  const std::string& d = ns_decode_;
  for (const std::string& ns : {p, d}) {
    if (absl::Status s = Ip({"netns", "add", ns}); !s.ok()) return s;
    created_.push_back(ns);
  }
  auto a = [this](int host) { return Address(host); };
  for (auto step : std::vector<std::function<absl::Status()>>{
           [&] { return IpIn(p, {"link", "set", "lo", "up"}); },
           [&] { return IpIn(d, {"link", "set", "lo", "up"}); },
           [&] { return Ip({"link", "add", rp, "type", "veth", "peer", "name", rP, "netns", p}); },
           [&] { return Ip({"link", "add", rd, "type", "veth", "peer", "name", rD, "netns", d}); },
           [&] { return IpIn(p, {"link", "add", pP, "type", "veth", "peer", "name", pD, "netns", d}); },
           [&] { return Ip({"addr", "add", a(1) + "/30", "dev", rp}); },
           [&] { return Ip({"addr", "add", a(5) + "/30", "dev", rd}); },
           [&] { return IpIn(p, {"addr", "add", a(2) + "/30", "dev", rP}); },
           [&] { return IpIn(d, {"addr", "add", a(6) + "/30", "dev", rD}); },
           [&] { return IpIn(p, {"addr", "add", a(9) + "/30", "dev", pP}); },
           [&] { return IpIn(d, {"addr", "add", a(10) + "/30", "dev", pD}); },
           [&] { return IpIn(p, {"addr", "add", prefill_host() + "/32", "dev", "lo"}); },
           [&] { return IpIn(d, {"addr", "add", decode_host() + "/32", "dev", "lo"}); },
           [&] { return Ip({"link", "set", rp, "up"}); },
           [&] { return Ip({"link", "set", rd, "up"}); },
           [&] { return IpIn(p, {"link", "set", rP, "up"}); },
           [&] { return IpIn(p, {"link", "set", pP, "up"}); },
           [&] { return IpIn(d, {"link", "set", rD, "up"}); },
           [&] { return IpIn(d, {"link", "set", pD, "up"}); },
           [&] { return Ip({"route", "add", prefill_host() + "/32", "via", a(2), "dev", rp}); },
           [&] { return Ip({"route", "add", decode_host() + "/32", "via", a(6), "dev", rd}); },
           [&] { return IpIn(d, {"route", "add", router_host() + "/32", "via", a(5), "dev", rD}); },
           [&] { return IpIn(p, {"route", "add", decode_host() + "/32", "via", a(10), "dev", pP}); },
       }) {
    if (absl::Status s = step(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PdNamespaces::Shape(const LinkSpec& link) {
  const bool delay = link.one_way_delay > absl::ZeroDuration();
  for (const auto& [ns, dev] : {std::pair{ns_prefill_, absl::StrCat("bt", tag_, "pP")},
                                std::pair{ns_decode_, absl::StrCat("bt", tag_, "pD")}}) {
    std::vector<std::string> parent = {"root"};
    if (link.rate_bits_per_second) {
      // Burst: 1 ms at the rate, at least four 64 KiB GSO packets.
      const int64_t burst = std::max<int64_t>(*link.rate_bits_per_second / 8 / 1000, 4 * 65536);
      if (absl::Status s = TcIn(ns, {"qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf",
                                     "rate", std::to_string(*link.rate_bits_per_second), "burst",
                                     std::to_string(burst), "latency", "100ms"});
          !s.ok()) {
        return s;
      }
      parent = {"parent", "1:1"};
    }
    if (!delay) continue;
    std::vector<std::string> netem = {"qdisc", "add", "dev", dev};
    netem.insert(netem.end(), parent.begin(), parent.end());
    netem.insert(netem.end(), {"handle", "10:", "netem", "delay",
                               absl::StrCat(absl::ToInt64Microseconds(link.one_way_delay), "us"),
                               "limit", "100000"});
    if (absl::Status s = TcIn(ns, netem); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--link delay needs the kernel's netem qdisc (sch_netem), which failed here: ",
          s.message(), "; tests/netns/netns_cluster.py emulates the delay with a relay instead"));
    }
  }
  return absl::OkStatus();
}

PdNamespaces::~PdNamespaces() {
  for (const std::string& ns : created_) KillProcessesIn(ns);
  for (const std::string& ns : created_) (void)Ip({"netns", "del", ns});
  // The veths go with the namespaces; these are for a half-built topology.
  (void)Ip({"link", "del", absl::StrCat("bt", tag_, "rp")});
  (void)Ip({"link", "del", absl::StrCat("bt", tag_, "rd")});
}

}  // namespace baton::cli

// libbraid_netguard.so: keeps a multi-host job's listening sockets on the job's network.
//
// Note [Job network listeners]: OpenMPI 4.1's daemons (mpirun, orted) and its TCP transport
// bind their listening sockets to the wildcard address, whatever btl/oob_tcp_if_include say
// (those choose only what is announced and used), so every address of every host, the outside
// network's included, would accept connections to the job. When `braid launch` is given or
// derives the job's network, it preloads this library into mpirun, the daemons and the ranks
// with BRAID_JOB_NETWORK (comma-separated IPv4 CIDRs); bind() to 0.0.0.0 becomes bind() to
// this host's address in that network, and bind() to :: becomes ::1 (the job uses IPv4; a
// wildcard IPv6 listener would face every network). Ports are kept. Everything else, and every
// process without BRAID_JOB_NETWORK or without an address in it, is untouched.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

using BindFn = int (*)(int, const sockaddr*, socklen_t);

// This host's first IPv4 address inside one of the job's networks (network byte order), or 0.
in_addr_t job_address() {
  const char* nets = std::getenv("BRAID_JOB_NETWORK");
  if (!nets || !*nets) return 0;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  in_addr_t found = 0;
  const char* p = nets;
  while (*p && !found) {
    const char* end = std::strchr(p, ',');
    const size_t n = end ? static_cast<size_t>(end - p) : std::strlen(p);
    char cidr[64] = {};
    std::memcpy(cidr, p, n < sizeof cidr - 1 ? n : sizeof cidr - 1);
    p += n + (end ? 1 : 0);
    char* slash = std::strchr(cidr, '/');
    const int bits = slash ? std::atoi(slash + 1) : 32;
    if (slash) *slash = '\0';
    in_addr net{};
    if (inet_pton(AF_INET, cidr, &net) != 1 || bits < 0 || bits > 32) continue;
    const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
    for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      const in_addr_t a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      if ((ntohl(a) & mask) == (ntohl(net.s_addr) & mask)) found = a;
    }
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

extern "C" int bind(int fd, const sockaddr* addr, socklen_t len) {
  static const BindFn real = reinterpret_cast<BindFn>(dlsym(RTLD_NEXT, "bind"));
  static const in_addr_t job = job_address();
  if (job != 0 && addr) {
    if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
      sockaddr_in a;
      std::memcpy(&a, addr, sizeof a);
      if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
        a.sin_addr.s_addr = job;
        return real(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
      }
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
      sockaddr_in6 a;
      std::memcpy(&a, addr, sizeof a);
      if (std::memcmp(&a.sin6_addr, &in6addr_any, sizeof(in6_addr)) == 0) {
        a.sin6_addr = in6addr_loopback;
        return real(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
      }
    }
  }
  return real(fd, addr, len);
}

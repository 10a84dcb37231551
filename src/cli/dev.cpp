// durable dev: a first try without a database of one's own. It starts a throwaway PostgreSQL
// (initdb in a per-user directory, loopback only), migrates it, prints the DURABLE_DATABASE_URL
// to export and serves the console (as `durable ui` does) until Ctrl-C, which stops both.
// docs/console.md, "A first try: durable dev".
//
// The directory (--dir) holds data/ (the cluster), password (the role's, made on the first run),
// port (the last one used: the exported URL stays valid from one run to the next as long as it
// is free), server.log and initdb.log. Running again reuses the cluster, so workflows survive;
// --fresh deletes those files first, and nothing else in the directory.
//
// Every program is run with fork and exec (no shell). PostgreSQL refuses to run as root, so
// when we are root initdb and the server run as the unprivileged user postgres, in a directory
// that user owns.
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/signal_set.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"

#if defined(DURABLE_HAS_CONSOLE)
#include "durable/console.hpp"
#endif

namespace durable_cli {

#if defined(DURABLE_HAS_CONSOLE)
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// Who runs initdb and the server: this process's user, or (as root) an unprivileged one.
struct pg_user {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  bool switch_to = false;  // setgid/setuid in the child
};

pg_user server_user() {
  pg_user u;
  if (::geteuid() != 0) {
    u.uid = ::geteuid();
    u.gid = ::getegid();
    if (const passwd* pw = ::getpwuid(u.uid)) u.name = pw->pw_name;
    return u;
  }
  // Debian's postgresql package makes the postgres user. Not nobody: the daemons that run as
  // nobody would own the cluster too (its socket trusts its owner).
  for (const char* name : {"postgres"})
    if (const passwd* pw = ::getpwnam(name)) {
      u.name = name;
      u.uid = pw->pw_uid;
      u.gid = pw->pw_gid;
      u.switch_to = true;
      return u;
    }
  throw failure(not_done,
                "PostgreSQL refuses to run as root and there is no postgres user to run it as "
                "(Debian: apt-get install postgresql makes it); run durable dev as an ordinary "
                "user");
}

/// The file's text ("" when it cannot be read). A symbolic link is not followed: as root, the
/// directory's files could be links planted by the server's user.
std::string read_text(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, std::size_t(n));
  ::close(fd);
  return out;
}

void write_text(const fs::path& p, const std::string& text, const pg_user* owner = nullptr) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != ssize_t(text.size()) ||
      (owner && owner->switch_to && ::fchown(fd, owner->uid, owner->gid) != 0)) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    throw failure(not_done, "could not write " + one_line(p) + ": " + std::strerror(e));
  }
  ::close(fd);
}

/// Prints the last lines of a log on stderr, above the error (report() prints one line).
std::string show_tail(const fs::path& log, std::size_t lines = 15) {
  std::vector<std::string> all;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) all.push_back(line);
  if (all.empty()) return " (" + one_line(log) + " is empty)";
  std::fprintf(stderr, "durable: the end of %s:\n", one_line(log).c_str());
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
    std::fprintf(stderr, "  %s\n", one_line(all[i]).c_str());
  return "; see the end of " + one_line(log) + " above";
}

struct spawn_options {
  const pg_user* user = nullptr;  // switch to it when it says so
  std::string output;             // append stdout and stderr to this file ("": a pipe, see out)
  int* out = nullptr;             // the read end of a pipe holding stdout and stderr
  bool own_group = false;         // not in our process group: Ctrl-C reaches us, not it
  int on_our_death = SIGKILL;     // what the child gets when this process dies
};

/// fork and exec `argv` (argv[0] a path); everything the child needs is made before the fork,
/// which then calls only what is safe there.
pid_t spawn(const std::vector<std::string>& args, const spawn_options& o) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int out_fd = -1, pipe_fds[2] = {-1, -1};
  if (o.out) {
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw failure(not_done, "pipe: out of descriptors");
    out_fd = pipe_fds[1];
  } else {
    // O_NOFOLLOW: as root, a link the server's user put in the directory would make root write
    // where it points.
    out_fd = ::open(o.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (out_fd < 0) throw failure(not_done, "could not open " + one_line(o.output));
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (o.own_group) ::setpgid(0, 0);
    if (o.user && o.user->switch_to &&
        (::setgroups(1, &o.user->gid) != 0 || ::setgid(o.user->gid) != 0 ||
         ::setuid(o.user->uid) != 0))
      ::_exit(126);
    // After the user switch, which clears it. A `durable dev` that is killed takes its server
    // down too (SIGINT: a fast shutdown), so the next run finds no server left behind.
    ::prctl(PR_SET_PDEATHSIG, o.on_our_death);
    if (::getppid() != parent) ::_exit(1);
    if (::chdir("/") != 0) ::_exit(126);  // our directory may be closed to the server's user
    ::dup2(null_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (null_fd >= 0) ::close(null_fd);
  ::close(out_fd);
  if (pid < 0) {
    if (o.out) ::close(pipe_fds[0]);
    throw failure(not_done, "fork failed: " + std::string(std::strerror(errno)));
  }
  if (o.out) *o.out = pipe_fds[0];
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Runs `args` as this user; its exit status and output.
std::pair<int, std::string> capture(const std::vector<std::string>& args) {
  int fd = -1;
  spawn_options o;
  o.out = &fd;
  const pid_t pid = spawn(args, o);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR);)
    if (n > 0) out.append(buf, std::size_t(n));
  ::close(fd);
  return {wait_for(pid), out};
}

bool executable(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0; }

/// The directory of initdb and postgres: PATH, then `pg_config --bindir`, then the newest
/// /usr/lib/postgresql/*/bin (Debian keeps them there, off PATH).
fs::path find_bindir() {
  auto has_both = [](const fs::path& d) {
    return executable(d / "initdb") && executable(d / "postgres");
  };
  std::vector<fs::path> path;
  if (const char* p = std::getenv("PATH"))
    for (std::stringstream s(p); !s.eof();) {
      std::string d;
      std::getline(s, d, ':');
      path.emplace_back(d);
    }
  for (const auto& d : path)
    if (!d.empty() && has_both(d)) return d;
  for (const auto& d : path)
    if (!d.empty() && executable(d / "pg_config")) {
      auto [status, out] = capture({(d / "pg_config").string(), "--bindir"});
      while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
      if (status == 0 && has_both(out)) return out;
      break;
    }
  fs::path newest;
  int newest_version = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const int v = std::atoi(e.path().filename().c_str());
    if (v > newest_version && has_both(e.path() / "bin"))
      newest = e.path() / "bin", newest_version = v;
  }
  if (newest_version >= 0) return newest;
  throw failure(not_done,
                "PostgreSQL's server programs (initdb, postgres) are not on PATH, in "
                "'pg_config --bindir' or in /usr/lib/postgresql/*/bin; install them (Debian: "
                "apt-get install postgresql) or put their directory on PATH");
}

/// The major version of the binaries in `bindir` ("15"), from `postgres -V`.
std::string major_of(const fs::path& bindir) {
  const auto [status, out] = capture({(bindir / "postgres").string(), "-V"});
  const auto at = out.find(") ");
  if (status != 0 || at == std::string::npos)
    throw failure(not_done, (bindir / "postgres").string() + " -V failed: " + one_line(out));
  return out.substr(at + 2, out.find_first_not_of("0123456789", at + 2) - at - 2);
}

std::string default_dir(const pg_user& u) {
  // root's home is closed to the server's user: a directory of that user's own under /tmp.
  if (u.switch_to) return "/tmp/durable-dev-" + u.name;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x == '/')
    return std::string(x) + "/durable-dev";
  const char* home = std::getenv("HOME");
  if (!home || !*home)
    if (const passwd* pw = ::getpwuid(::geteuid())) home = pw->pw_dir;
  if (!home) throw failure(bad_usage, "dev: no HOME to put the cluster under; give --dir");
  return std::string(home) + "/.local/share/durable-dev";
}

/// The directory, made when missing; refused when someone else's. As root, the server's user
/// must reach it (it owns only what it writes: the data directory).
void prepare_dir(const fs::path& dir, const pg_user& u) {
  std::error_code ec;
  const bool made = fs::create_directories(dir, ec);
  struct stat st {};
  if (ec || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw failure(not_done, "--dir " + one_line(dir) + ": not a directory we can make (" +
                                (ec ? ec.message() : "a symbolic link or a file") + ")");
  // A directory another user made (in /tmp, say) could hold links into someone's files.
  if (st.st_uid != ::geteuid() && st.st_uid != u.uid)
    throw failure(not_done, "--dir " + one_line(dir) + " belongs to another user (uid " +
                                std::to_string(st.st_uid) + "); choose another --dir");
  if (made &&
      ((u.switch_to && ::chown(dir.c_str(), u.uid, u.gid) != 0) || ::chmod(dir.c_str(), 0700) != 0))
    throw failure(not_done, "--dir " + one_line(dir) + ": " + std::strerror(errno));
  if (!u.switch_to) return;
  const pid_t pid = ::fork();
  if (pid == 0) {
    const bool ok = ::setgroups(1, &u.gid) == 0 && ::setgid(u.gid) == 0 && ::setuid(u.uid) == 0 &&
                    ::access(dir.c_str(), X_OK) == 0;
    ::_exit(ok ? 0 : 1);
  }
  if (pid < 0 || wait_for(pid) != 0)
    throw failure(not_done, "--dir " + one_line(dir) + ": the server runs as user '" + u.name +
                                "' (PostgreSQL refuses to run as root), which cannot reach it "
                                "(a directory above it is closed to others, as /root is); "
                                "choose a --dir it can reach, such as /tmp/durable-dev-" +
                                u.name);
}

/// Alive, and not a zombie waiting for a parent that does not reap (a container's init).
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close == std::string::npos || stat.substr(close + 2, 1) != "Z";
}

/// A server an earlier `durable dev` left running (killed before it could stop it, or one
/// started by hand with pg_ctl): stopped, so that ours starts on our port as our child. A lock
/// file whose process is gone is removed (its pid may have been reused).
void stop_stale(const fs::path& data) {
  const fs::path lock = data / "postmaster.pid";
  if (!fs::exists(lock)) return;
  const pid_t pid = std::atoi(read_text(lock).c_str());
  const std::string comm = read_text("/proc/" + std::to_string(pid) + "/comm");
  // Ours only if it runs in this data directory (a server's working directory is its data
  // directory): a stale lock's pid may belong to another cluster now.
  std::error_code ec;
  const auto cwd = fs::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec);
  const bool ours = !ec && fs::equivalent(cwd, data, ec) && !ec;
  if (pid <= 0 || !alive(pid) || !comm.starts_with("postgres") || !ours) {
    fs::remove(lock);
    return;
  }
  std::fprintf(stderr, "durable: stopping the server left running in %s (pid %d)\n",
               one_line(data).c_str(), int(pid));
  for (const int sig : {SIGINT, SIGQUIT}) {  // fast shutdown, then immediate
    ::kill(pid, sig);
    for (int i = 0; i < 300 && alive(pid) && fs::exists(lock); ++i)
      std::this_thread::sleep_for(100ms);
    if (!alive(pid) || !fs::exists(lock)) return;
  }
  throw failure(not_done, "the server left running in " + one_line(data) + " (pid " +
                              std::to_string(pid) + ") does not stop; stop it, then run again");
}

void stop_server(pid_t pid) {
  ::kill(pid, SIGINT);  // fast shutdown: sessions are ended, the data is kept
  for (int i = 0; i < 600; ++i) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(100ms);
  }
  ::kill(pid, SIGQUIT);
  wait_for(pid);
}

/// Stops the server however cmd_dev ends (an error while migrating, a console that cannot bind).
struct server_guard {
  pid_t pid = -1;
  ~server_guard() {
    if (pid > 0) stop_server(pid);
  }
};

std::string random_password() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 24; ++i) out += "0123456789abcdef"[rd() % 16];
  return out;
}

bool port_free(std::uint16_t port) {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io);
  asio::error_code ec;
  a.open(asio::ip::tcp::v4(), ec);
  if (!ec) a.bind({asio::ip::make_address_v4("127.0.0.1"), port}, ec);
  return !ec;
}

std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address_v4("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

/// Waits until the server answers (bounded); a server that exits, or takes too long, is an
/// error showing its log.
void wait_ready(pid_t pid, std::uint16_t port, const fs::path& data, const fs::path& log) {
  const std::string conninfo =
      "host=127.0.0.1 port=" + std::to_string(port) + " dbname=postgres connect_timeout=2";
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (PQping(conninfo.c_str()) != PQPING_OK) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      throw failure(not_done, "PostgreSQL did not start" + show_tail(log));
    if (std::chrono::steady_clock::now() > deadline)
      throw failure(not_done, "PostgreSQL did not accept connections within 60 s" + show_tail(log));
    std::this_thread::sleep_for(100ms);
  }
  // Something answered: ours only if our child still runs and holds the data directory's lock
  // (another server that took the port meanwhile would answer too).
  int status = 0;
  const bool exited = ::waitpid(pid, &status, WNOHANG) == pid;
  if (exited || std::atoi(read_text(data / "postmaster.pid").c_str()) != int(pid))
    throw failure(not_done, "PostgreSQL did not start on port " + std::to_string(port) +
                                " (another server answers there?)" + show_tail(log));
}

/// The database `durable`, made when missing (the role owns the cluster: it may).
void ensure_database(std::uint16_t port, const std::string& password) {
  const std::string p = std::to_string(port);
  const char* keys[] = {"host", "port", "user", "password", "dbname", nullptr};
  const char* values[] = {"127.0.0.1", p.c_str(), "durable", password.c_str(), "postgres", nullptr};
  PGconn* c = PQconnectdbParams(keys, values, 0);
  auto query = [&](const char* sql) {
    PGresult* r = PQexec(c, sql);
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK;
    const bool some = ok && PQntuples(r) > 0;
    PQclear(r);
    if (!ok) throw failure(database_trouble, std::string(sql) + ": " + PQerrorMessage(c));
    return some;
  };
  try {
    if (PQstatus(c) != CONNECTION_OK)
      throw failure(database_trouble,
                    "connecting to the new server: " + std::string(PQerrorMessage(c)) +
                        " (a password file from another cluster? --fresh "
                        "starts over)");
    if (!query("SELECT 1 FROM pg_database WHERE datname = 'durable'"))
      query("CREATE DATABASE durable");
  } catch (...) {
    PQfinish(c);
    throw;
  }
  PQfinish(c);
}

}  // namespace

int cmd_dev(const settings& g, const dev_args& a, double lease_s) {
  // The console's options first: a mistake there is said before a cluster is made.
  durable::console_options co = console_options_of(a.console, lease_s);
  const pg_user user = server_user();
  const fs::path dir = fs::absolute(a.dir.empty() ? default_dir(user) : a.dir).lexically_normal();
  const fs::path data = dir / "data", log = dir / "server.log";
  const fs::path bindir = find_bindir();
  const std::string major = major_of(bindir);

  prepare_dir(dir, user);
  stop_stale(data);
  if (a.fresh) {
    for (const char* f :
         {"data", "data.initdb", "initdb.pw", "password", "port", "server.log", "initdb.log"})
      fs::remove_all(dir / f);
    std::fprintf(stderr, "durable: --fresh: deleted the cluster in %s\n", one_line(dir).c_str());
  }

  // The cluster: made once, under another name until initdb has finished (an interrupted
  // initdb leaves no half cluster that a later run would take for a whole one).
  std::string password;
  if (fs::exists(data) && !fs::exists(data / "PG_VERSION"))
    throw failure(not_done, one_line(data) + " is not a PostgreSQL cluster; --fresh deletes it");
  if (!fs::exists(data)) {
    const fs::path fresh = dir / "data.initdb", pwfile = dir / "initdb.pw";
    fs::remove_all(fresh);
    // Made here, owned by the server's user: as root, that user need not own `dir`.
    if (::mkdir(fresh.c_str(), 0700) != 0 ||
        (user.switch_to && ::chown(fresh.c_str(), user.uid, user.gid) != 0))
      throw failure(not_done, "could not make " + one_line(fresh) + ": " + std::strerror(errno));
    password = random_password();
    write_text(pwfile, password + "\n", &user);
    std::fprintf(stderr, "durable: creating a PostgreSQL %s cluster in %s (initdb)\n",
                 major.c_str(), one_line(data).c_str());
    fs::remove(dir / "initdb.log");
    spawn_options o;
    o.user = &user;
    o.output = (dir / "initdb.log").string();
    // Trust on the unix socket only (it lies in the data directory, which only the server's
    // user can open); TCP, loopback only, asks for the password. --no-sync: the sync takes
    // seconds of a first try, and only a machine crashing right after would show its absence.
    const pid_t pid =
        spawn({(bindir / "initdb").string(), "-D", fresh.string(), "-U", "durable", "-E", "UTF8",
               "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256",
               "--pwfile=" + pwfile.string(), "--no-instructions", "--no-sync"},
              o);
    const int status = wait_for(pid);
    fs::remove(pwfile);
    if (status != 0)
      throw failure(not_done, "initdb failed (exit status " + std::to_string(status) + ")" +
                                  show_tail(dir / "initdb.log"));
    // The password first: a cluster without it would be of no use.
    write_text(dir / "password", password + "\n");
    fs::rename(fresh, data);
  } else {
    password = read_text(dir / "password");
    while (!password.empty() && password.back() == '\n') password.pop_back();
    if (password.empty())
      throw failure(not_done, one_line(dir / "password") +
                                  " is missing: the cluster's password is unknown; --fresh "
                                  "starts over (deleting its data)");
  }
  std::string cluster_major = read_text(data / "PG_VERSION");
  while (!cluster_major.empty() && cluster_major.back() == '\n') cluster_major.pop_back();
  if (cluster_major != major)
    throw failure(not_done, one_line(data) + " holds a PostgreSQL " + one_line(cluster_major) +
                                " cluster and " + one_line(bindir) + " has PostgreSQL " + major +
                                "; --fresh starts over (deleting its data), or give --dir another "
                                "directory");

  // The port: --port, else last run's when it is still free (the URL exported then still
  // works), else any free one.
  std::uint16_t port = a.port;
  if (port == 0) {
    const int last = std::atoi(read_text(dir / "port").c_str());
    port = last > 0 && last < 65536 && port_free(std::uint16_t(last)) ? std::uint16_t(last)
                                                                      : free_port();
  }

  // The socket beside the data when its path fits a socket address (107 bytes), else none.
  const std::string socket_dir = data.string().size() + 20 < 107 ? data.string() : "";
  spawn_options o;
  o.user = &user;
  o.output = log.string();
  o.own_group = true;       // Ctrl-C reaches us; we stop the console first, then the server
  o.on_our_death = SIGINT;  // killed uncleanly: the server still shuts down
  server_guard server;
  server.pid =
      spawn({(bindir / "postgres").string(), "-D", data.string(), "-p", std::to_string(port), "-c",
             "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + socket_dir},
            o);
  wait_ready(server.pid, port, data, log);
  write_text(dir / "port", std::to_string(port) + "\n");  // one the server could use
  ensure_database(port, password);

  const std::string url =
      "postgresql://durable:" + password + "@127.0.0.1:" + std::to_string(port) + "/durable";
  hide_secrets_of(url);
  settings here = g;
  here.database = url;
  int result = done;
  {
    session s(here);
    (void)run(s.io, s.eng.migrate());
    const bool actions = !co.read_only && !co.token.empty();
    durable::console c(s.io, s.eng, std::move(co));
    try {
      c.start();
    } catch (const std::exception& e) {
      throw failure(not_done, "--listen " + one_line(a.console.listen) + ": " + e.what());
    }
    // On stdout, flushed: a script (tests/test_dev.py) reads the URL and the console from it.
    std::printf("PostgreSQL %s on 127.0.0.1:%u (data in %s)\n", major.c_str(), unsigned(port),
                one_line(dir).c_str());
    std::printf("export DURABLE_DATABASE_URL=%s\n", url.c_str());
    if (here.schema != "durable")
      std::printf("export DURABLE_SCHEMA=%s\n", shell_word(here.schema).c_str());
    std::printf("console: %s%s\nCtrl-C stops both.\n", c.url().c_str(),
                actions ? " (actions need the token: sign in on the page)" : "");
    std::fflush(stdout);

    // SIGCHLD: the server died under us (killed, out of disk); say so rather than serve pages
    // that all fail.
    asio::signal_set signals(s.io, SIGINT, SIGTERM, SIGCHLD);
    std::function<void(const asio::error_code&, int)> on_signal = [&](const asio::error_code& ec,
                                                                      int sig) {
      if (ec) return;
      if (sig == SIGCHLD && ::waitpid(server.pid, nullptr, WNOHANG) != server.pid) {
        signals.async_wait(on_signal);
        return;
      }
      if (sig == SIGCHLD) {
        server.pid = -1;
        result = report(not_done, "PostgreSQL stopped" + show_tail(log));
      }
      c.stop();
      s.io.stop();
    };
    signals.async_wait(on_signal);
    s.io.restart();
    s.io.run();
  }
  if (server.pid > 0) {
    stop_server(server.pid);
    server.pid = -1;
    std::fprintf(stderr, "durable: stopped the console and PostgreSQL (data kept in %s)\n",
                 one_line(dir).c_str());
  }
  return result;
}
#else
int cmd_dev(const settings& g, const dev_args& a, double lease_s) {
  (void)g, (void)a, (void)lease_s;
  throw failure(not_done,
                "this durable was built without the web console (CMake did not find RESTinio; "
                "Debian: apt-get install librestinio-dev, then rebuild)");
}
#endif

}  // namespace durable_cli

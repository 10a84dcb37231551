// The web console's server (include/durable/console.hpp, docs/console.md): RESTinio on the
// application's io_context, the pages' assets embedded at build time (console_assets.cpp,
// generated from src/console/assets/), and a JSON API over the statements the CLI reads with
// (sql/statements/admin_*.sql, console_series.sql). Each API request runs as a coroutine on
// the engine's strand with one connection of its pool.
#include "durable/console.hpp"

#include <restinio/all.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <charconv>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "assets.hpp"
#include "durable.hpp"
#include "durable/store.hpp"
#include "request.hpp"

namespace durable {
namespace {

using ojson = nlohmann::ordered_json;
using traits = restinio::traits_t<restinio::asio_timer_manager_t, restinio::null_logger_t>;
using server_t = restinio::http_server_t<traits>;

// Headers on every response. The pages load their script and style from /assets/ only, fetch
// the API from the same origin, and may not be framed; nothing is cached (the data is live and
// may be confidential).
constexpr const char* content_security_policy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

void secure(restinio::response_builder_t<restinio::restinio_controlled_output_t>& r) {
  r.append_header("Content-Security-Policy", content_security_policy);
  r.append_header("X-Content-Type-Options", "nosniff");
  r.append_header("X-Frame-Options", "DENY");
  r.append_header("Referrer-Policy", "no-referrer");
  r.append_header("Cross-Origin-Opener-Policy", "same-origin");
  r.append_header("Cross-Origin-Resource-Policy", "same-origin");
  r.append_header("Cache-Control", "no-store");
}

void reply(const restinio::request_handle_t& req, restinio::http_status_line_t status,
           std::string_view type, std::string body) {
  auto r = req->create_response(std::move(status));
  secure(r);
  r.append_header(restinio::http_field::content_type, std::string(type));
  r.set_body(std::move(body));
  r.done();
}

void reply_json(const restinio::request_handle_t& req, restinio::http_status_line_t status,
                const ojson& body) {
  // error_handler_t::replace: a message (from an exception) that is not UTF-8 gets U+FFFD
  // instead of failing the reply. (Rows come from the server's JSON, which is valid UTF-8 in a
  // UTF-8 database.)
  reply(req, std::move(status), "application/json; charset=utf-8",
        body.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

void reply_error(const restinio::request_handle_t& req, restinio::http_status_line_t status,
                 const std::string& message) {
  reply_json(req, std::move(status), ojson{{"error", message}});
}

}  // namespace

// What a stopped console answers on a connection that is still open (keep-alive): 503, and
// the connection is closed.
struct stopped_error : std::runtime_error {
  stopped_error() : std::runtime_error("the console has stopped") {}
};

// The server's state, shared: RESTinio's request handler holds it weakly (connections may
// outlive the console object), each API request strongly until it has replied.
struct console::impl : std::enable_shared_from_this<console::impl> {
  asio::io_context& io;
  engine& eng;
  console_options options;
  std::unique_ptr<server_t> server;
  std::uint16_t bound_port = 0;
  bool stopped = false;

  impl(asio::io_context& i, engine& e, console_options o) : io(i), eng(e), options(std::move(o)) {}

  // ---- requests --------------------------------------------------------------------------

  restinio::request_handling_status_t handle(restinio::request_handle_t req) {
    const auto& h = req->header();
    if (stopped) {
      auto r = req->create_response(restinio::status_service_unavailable());
      secure(r);
      r.connection_close();
      r.set_body(R"({"error":"the console has stopped"})");
      r.done();
      return restinio::request_accepted();
    }
    const bool get = h.method() == restinio::http_method_get();
    const std::string host = h.has_field(restinio::http_field::host)
                                 ? std::string(h.get_field(restinio::http_field::host))
                                 : std::string();
    if (!console_detail::host_allowed(host, options.address, options.allowed_hosts)) {
      reply_error(
          req,
          restinio::http_status_line_t(restinio::http_status_code_t(421), "Misdirected Request"),
          "this console does not answer for the host '" + host +
              "'; open it by its listen address, or add the name with --allow-host");
      return restinio::request_accepted();
    }
    const std::string path(h.path());
    if (!get) {
      reply_error(req, restinio::status_method_not_allowed(),
                  "the console's pages are read-only: only GET is served");
      return restinio::request_accepted();
    }
    if (const auto* a = console_detail::find_asset(path)) {
      reply(req, restinio::status_ok(), a->content_type, std::string(a->body));
      return restinio::request_accepted();
    }
    if (path.rfind("/api/", 0) != 0) {
      reply_error(req, restinio::status_not_found(), "no page at " + path);
      return restinio::request_accepted();
    }
    console_detail::params p;
    try {
      const auto q =
          restinio::parse_query<restinio::parse_query_traits::javascript_compatible>(h.query());
      for (const auto& [k, v] : q) p.emplace(std::string(k), std::string(v));
    } catch (const std::exception& e) {
      reply_error(req, restinio::status_bad_request(),
                  std::string("the query string is not valid: ") + e.what());
      return restinio::request_accepted();
    }
    // api() replies in every case and lets nothing escape; the completion handler has nothing
    // left to do.
    asio::co_spawn(eng.executor(), api(shared_from_this(), req, path, std::move(p)),
                   [](std::exception_ptr) noexcept {});
    return restinio::request_accepted();
  }

  // One API request: exactly one reply, whatever happens. An exception becomes the reply's
  // {"error": ...} with a status that says whose fault it is.
  static asio::awaitable<void> api(std::shared_ptr<impl> self, restinio::request_handle_t req,
                                   std::string path, console_detail::params p) {
    restinio::http_status_line_t status = restinio::status_ok();
    ojson body;
    try {
      body = co_await self->answer(path, p);
    } catch (const console_detail::bad_request& e) {
      status = restinio::status_bad_request();
      body = ojson{{"error", e.what()}};
    } catch (const console_detail::not_found& e) {
      status = restinio::status_not_found();
      body = ojson{{"error", e.what()}};
    } catch (const pg::invalid_datetime_format& e) {  // since, until or a cursor's time
      status = restinio::status_bad_request();
      body = ojson{{"error", std::string("a time the server cannot read: ") + e.what()}};
    } catch (const pg::datetime_field_overflow& e) {
      status = restinio::status_bad_request();
      body = ojson{{"error", std::string("a time the server cannot read: ") + e.what()}};
    } catch (const pg::statement_timeout&) {
      status = restinio::status_service_unavailable();
      body = ojson{{"error", "the database did not answer in time; try again"}};
    } catch (const pg::connection_error& e) {
      status = restinio::status_service_unavailable();
      body = ojson{{"error", std::string("the database is unreachable: ") + e.what()}};
    } catch (const stopped_error& e) {
      status = restinio::status_service_unavailable();
      body = ojson{{"error", e.what()}};
    } catch (const std::exception& e) {
      status = restinio::status_internal_server_error();
      body = ojson{{"error", e.what()}};
    }
    try {
      reply_json(req, std::move(status), body);
    } catch (...) {  // the connection is gone, or no memory for the reply: nothing to tell
    }
  }

  // After every wait: a console stopped meanwhile touches neither the engine nor its options.
  void check_running() const {
    if (stopped) throw stopped_error();
  }

  asio::awaitable<std::vector<ojson>> rows(query<store::json_value> q) {
    check_running();
    std::vector<store::json_value> got;
    {
      auto c = co_await eng.pool().acquire();
      check_running();
      got = co_await store::fetch(*c, std::move(q));
    }
    check_running();
    std::vector<ojson> out;
    out.reserve(got.size());
    for (const auto& r : got) out.push_back(ojson::parse(r.json));
    co_return out;
  }

  asio::awaitable<ojson> one(query<store::json_value> q) {
    auto got = co_await rows(std::move(q));
    co_return got.empty() ? ojson(nullptr) : std::move(got.front());
  }

  asio::awaitable<ojson> answer(const std::string& path, const console_detail::params& p) {
    const auto& st = detail::store_of(eng);
    if (path == "/api/session") {
      co_return ojson{{"schema", eng.schema_name()},
                      {"read_only", true},
                      {"version", std::to_string(DURABLE_VERSION_MAJOR) + "." +
                                      std::to_string(DURABLE_VERSION_MINOR) + "." +
                                      std::to_string(DURABLE_VERSION_PATCH)}};
    }
    if (path == "/api/overview") {
      ojson out = ojson::object();
      auto stats = st.admin_stats(options.lease_s);
      out["stats"] = co_await one(std::move(stats));
      auto queues = st.admin_queues();
      out["queues"] = co_await rows(std::move(queues));
      auto executors = st.admin_executors(options.lease_s);
      out["executors"] = co_await rows(std::move(executors));
      auto series = st.console_series();
      out["series"] = co_await one(std::move(series));
      co_return out;
    }
    if (path == "/api/workflows") {
      auto f = console_detail::list_filter_of(p, options.max_page);
      const auto limit = f.limit;
      f.limit = limit + 1;  // one more: is there a next page?
      auto q = st.admin_list(f);
      auto found = co_await rows(std::move(q));
      ojson next = nullptr;
      if (std::int64_t(found.size()) > limit) {
        found.pop_back();
        const auto& last = found.back();
        next = last.at("created_at").get<std::string>() + "|" + last.at("id").get<std::string>();
      }
      co_return ojson{{"rows", std::move(found)}, {"next", std::move(next)}};
    }
    if (path == "/api/workflow") {
      const auto id = console_detail::required(p, "id");
      auto q = st.admin_show(id);
      auto found = co_await one(std::move(q));
      if (found.is_null()) throw console_detail::not_found("no workflow has the id '" + id + "'");
      co_return found;
    }
    if (path == "/api/queues") {
      auto q = st.admin_queues();
      auto found = co_await rows(std::move(q));
      co_return ojson{{"rows", std::move(found)}};
    }
    if (path == "/api/executors") {
      auto q = st.admin_executors(options.lease_s);
      auto found = co_await rows(std::move(q));
      co_return ojson{{"rows", std::move(found)}};
    }
    if (path == "/api/schedules") {
      const std::string prefix;
      auto q = st.schedules_list(prefix);
      auto found = co_await rows(std::move(q));
      co_return ojson{{"rows", std::move(found)}};
    }
    throw console_detail::not_found("no API at " + path);
  }
};

console::console(asio::io_context& io, engine& eng, console_options options)
    : impl_(std::make_shared<impl>(io, eng, std::move(options))) {}

console::~console() {
  try {
    stop();
  } catch (...) {  // closing a listening socket that is gone already
  }
}

void console::start() {
  if (impl_->server) return;
  auto& o = impl_->options;
  asio::error_code ec;
  const auto address = asio::ip::make_address(o.address, ec);
  if (ec)
    throw std::invalid_argument("console: '" + o.address +
                                "' is not an IP address to listen on (for example 127.0.0.1)");
  std::weak_ptr<impl> weak = impl_;
  impl_->stopped = false;
  impl_->server =
      std::make_unique<server_t>(restinio::external_io_context(impl_->io),
                                 restinio::server_settings_t<traits>{}
                                     .address(address)
                                     .port(o.port)
                                     // An idle keep-alive connection closes after this; one that
                                     // sends a request after stop() is answered 503 and closed.
                                     .read_next_http_message_timelimit(std::chrono::seconds(10))
                                     .request_handler([weak](auto req) {
                                       if (auto self = weak.lock())
                                         return self->handle(std::move(req));
                                       return restinio::request_rejected();
                                     })
                                     .acceptor_post_bind_hook([weak](asio::ip::tcp::acceptor& a) {
                                       if (auto self = weak.lock())
                                         self->bound_port = a.local_endpoint().port();
                                     }));
  try {
    impl_->server->open_sync();
  } catch (const std::exception& e) {
    impl_->server.reset();
    throw std::runtime_error("console: cannot listen on " + o.address + ":" +
                             std::to_string(o.port) + ": " + e.what() +
                             "; choose another port (--listen), or 0 for any free one");
  }
}

void console::stop() {
  impl_->stopped = true;
  if (!impl_->server) return;
  impl_->server->close_sync();
  impl_->server.reset();
}

std::uint16_t console::port() const noexcept { return impl_->bound_port; }

std::string console::url() const {
  const auto& a = impl_->options.address;
  const bool v6 = a.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + a + "]" : a) + ":" + std::to_string(port()) + "/";
}

}  // namespace durable

// The web console's server (include/durable/console.hpp, docs/console.md): RESTinio on the
// application's io_context, the pages' assets embedded at build time (console_assets.cpp,
// generated from src/console/assets/), and a JSON API over the statements the CLI reads with
// (sql/statements/admin_*.sql, console_series.sql). Each API request runs as a coroutine on
// the engine's strand with one connection of its pool.
#include "durable/console.hpp"

#include <restinio/all.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <charconv>
#include <deque>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actions.hpp"
#include "assets.hpp"
#include "auth.hpp"
#include "durable.hpp"
#include "durable/store.hpp"
#include "request.hpp"

namespace durable {
namespace {

using ojson = nlohmann::ordered_json;
using traits = restinio::traits_t<restinio::asio_timer_manager_t, restinio::null_logger_t>;
using server_t = restinio::http_server_t<traits>;
using console_detail::gate_t;

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
  // instead of failing the reply (rows are the server's JSON: UTF-8 in a UTF-8 database).
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
  console_detail::sessions signed_in;
  std::chrono::steady_clock::time_point next_refusal{};
  gate_t gate;

  impl(asio::io_context& i, engine& e, console_options o)
      : io(i),
        eng(e),
        options(std::move(o)),
        gate{options.max_queries < 1 ? 1 : options.max_queries, {}} {}

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
    if (h.method() == restinio::http_method_post()) return handle_post(req, path, host);
    if (!get) {
      reply_error(req, restinio::status_method_not_allowed(),
                  "the console answers GET, and POST for its actions");
      return restinio::request_accepted();
    }
    if (path == "/api/session") {
      reply_json(req, restinio::status_ok(), session_info(*req));
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
      p = console_detail::parse_query(h.query());
    } catch (const console_detail::bad_request& e) {
      return refuse(req, 400, "Bad Request", e.what());
    }
    // api() replies in every case and lets nothing escape: the handler has nothing to do.
    asio::co_spawn(eng.executor(), api(shared_from_this(), req, path, std::move(p)),
                   [](std::exception_ptr) noexcept {});
    return restinio::request_accepted();
  }

  // ---- actions (POST) ---------------------------------------------------------------------

  [[nodiscard]] bool actions_on() const { return !options.read_only && !options.token.empty(); }
  [[nodiscard]] std::string cookie_name() const {
    // Cookies do not tell ports apart: two consoles on one host keep their own sessions.
    return "durable_session_" + std::to_string(bound_port);
  }

  // The session the request's cookie names, if it is live.
  const console_detail::sessions::session* session_of(const restinio::request_t& req) {
    const auto& h = req.header();
    if (!h.has_field(restinio::http_field::cookie)) return nullptr;
    const auto id =
        console_detail::cookie_value(h.get_field(restinio::http_field::cookie), cookie_name());
    return id ? signed_in.find(*id) : nullptr;
  }

  ojson session_info(const restinio::request_t& req) {
    const auto* s = actions_on() ? session_of(req) : nullptr;
    return ojson{{"schema", eng.schema_name()},
                 {"read_only", !actions_on()},
                 {"actions", actions_on()},
                 {"why_read_only", options.read_only       ? "started read-only (--read-only)"
                                   : options.token.empty() ? "no token: start it with --token-file"
                                                           : ""},
                 {"signed_in", s != nullptr},
                 {"who", s ? ojson(s->who) : ojson(nullptr)},
                 {"csrf", s ? ojson(s->csrf) : ojson(nullptr)},
                 {"version", std::to_string(DURABLE_VERSION_MAJOR) + "." +
                                 std::to_string(DURABLE_VERSION_MINOR) + "." +
                                 std::to_string(DURABLE_VERSION_PATCH)}};
  }

  restinio::request_handling_status_t refuse(const restinio::request_handle_t& req, int code,
                                             const char* reason, const std::string& message) {
    reply_error(req, restinio::http_status_line_t(restinio::http_status_code_t(code), reason),
                message);
    return restinio::request_accepted();
  }

  // A POST: checked here (read-only, origin, credentials, the session's token against forgery,
  // the body), then run as a coroutine on the engine's strand like a GET of the API.
  restinio::request_handling_status_t handle_post(const restinio::request_handle_t& req,
                                                  const std::string& path,
                                                  const std::string& host) {
    const auto& h = req->header();
    if (path != "/api/login" && path != "/api/logout" && path != "/api/action" &&
        path != "/api/bulk")
      return refuse(req, 405, "Method Not Allowed",
                    "POST goes to /api/login, /api/logout, /api/action or /api/bulk only");
    if (!actions_on())
      return refuse(req, 403, "Forbidden",
                    std::string("this console is read-only: ") +
                        (options.read_only ? "it was started with --read-only"
                                           : "it was started without a token (--token-file)"));
    if (h.has_field(restinio::http_field::origin) &&
        !console_detail::origin_allowed(std::string(h.get_field(restinio::http_field::origin)),
                                        host, options.allowed_hosts))
      return refuse(req, 403, "Forbidden",
                    "a POST sent from another site (Origin: " +
                        std::string(h.get_field(restinio::http_field::origin)) + ") is refused");
    const auto type = h.has_field(restinio::http_field::content_type)
                          ? std::string(h.get_field(restinio::http_field::content_type))
                          : std::string();
    if (type.rfind("application/json", 0) != 0)
      return refuse(req, 415, "Unsupported Media Type",
                    "the body must be JSON, sent with Content-Type: application/json");
    if (req->body().size() > (1u << 20))
      return refuse(req, 413, "Payload Too Large",
                    "the body is over 1 MiB; act on fewer workflows at once");
    ojson body;
    try {
      body = ojson::parse(req->body());
    } catch (const std::exception& e) {
      return refuse(req, 400, "Bad Request", std::string("the body is not JSON: ") + e.what());
    }
    if (const auto why = console_detail::refused_body(body))
      return refuse(req, 400, "Bad Request", *why);
    if (path == "/api/login") return login(req, body);
    console_detail::actor who;
    who.address = req->remote_endpoint().address().to_string();
    const std::string bearer = "Bearer ";
    const std::string auth = h.has_field(restinio::http_field::authorization)
                                 ? std::string(h.get_field(restinio::http_field::authorization))
                                 : std::string();
    // Only a Bearer header is ours: a reverse proxy's Basic credentials pass through to the
    // cookie's check.
    if (auth.rfind(bearer, 0) == 0) {
      who.who = "token";
      if (!console_detail::same_secret(auth.substr(bearer.size()), options.token))
        return refuse_later(req, "the Authorization header holds no valid token", who);
    } else {
      const auto* s = session_of(*req);
      if (!s)
        return refuse(req, 401, "Unauthorized",
                      "sign in first: actions need the console's token (or a session that "
                      "ended: sign in again)");
      const auto csrf = h.get_field_or("X-Durable-CSRF", "");
      if (!console_detail::same_secret(csrf, s->csrf))
        return refuse(req, 403, "Forbidden",
                      "the request lacks the page's token against cross-site requests "
                      "(X-Durable-CSRF); reload the page");
      who.who = s->who;
    }
    if (path == "/api/logout") {
      if (const auto id = h.has_field(restinio::http_field::cookie)
                              ? console_detail::cookie_value(
                                    h.get_field(restinio::http_field::cookie), cookie_name())
                              : std::nullopt)
        signed_in.close(*id);
      auto r = req->create_response(restinio::status_ok());
      secure(r);
      r.append_header(restinio::http_field::set_cookie,
                      cookie_name() + "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
      r.append_header(restinio::http_field::content_type, "application/json; charset=utf-8");
      r.set_body(R"({"signed_in":false})");
      r.done();
      return restinio::request_accepted();
    }
    asio::co_spawn(eng.executor(), act(shared_from_this(), req, path, std::move(body), who),
                   [](std::exception_ptr) noexcept {});
    return restinio::request_accepted();
  }

  // A wrong token is answered 401 after a second, and one at a time: guessing it takes that
  // long per try, however many connections try at once.
  // Each is written in the audit ('sign_in', refused) as it is answered.
  restinio::request_handling_status_t refuse_later(const restinio::request_handle_t& req,
                                                   std::string message, console_detail::actor who) {
    const auto at =
        std::max(std::chrono::steady_clock::now(), next_refusal) + std::chrono::seconds(1);
    next_refusal = at;
    auto timer = std::make_shared<asio::steady_timer>(io, at);
    timer->async_wait([timer, req, message = std::move(message), who = std::move(who),
                       weak = weak_from_this()](const asio::error_code&) {
      try {
        reply_error(req, restinio::status_unauthorized(), message);
      } catch (...) {  // the client has gone
      }
      if (auto self = weak.lock(); self && !self->stopped)
        asio::co_spawn(self->eng.executor(),
                       console_detail::audit_sign_in(self->eng, self->options.query_timeout, who,
                                                     "refused", message),
                       [self](std::exception_ptr) noexcept {});
    });
    return restinio::request_accepted();
  }

  // A sign-in opens its session once the audit holds its row (503 when it cannot); a wrong
  // token's row is written 'refused' as its answer goes out (refuse_later: one a second).
  restinio::request_handling_status_t login(const restinio::request_handle_t& req,
                                            const ojson& body) {
    const auto token = body.find("token");
    if (token == body.end() || !token->is_string())
      return refuse(req, 400, "Bad Request", "the field 'token' is required");
    const console_detail::actor who{console_detail::signer_name(body), "console",
                                    req->remote_endpoint().address().to_string()};
    if (!console_detail::same_secret(token->get<std::string>(), options.token))
      return refuse_later(req, "this is not the console's token", who);
    asio::co_spawn(eng.executor(),
                   console_detail::audit_sign_in(eng, options.query_timeout, who, "done", ""),
                   [self = shared_from_this(), req, who](std::exception_ptr e) {
                     asio::post(self->io, [self, req, who, e] { self->open_session(req, who, e); });
                   });
    return restinio::request_accepted();
  }

  void open_session(const restinio::request_handle_t& req, const console_detail::actor& who,
                    std::exception_ptr unaudited) {
    try {
      if (unaudited) std::rethrow_exception(unaudited);
      check_running();
      // A sign-in over a session this browser still holds ends that one.
      if (req->header().has_field(restinio::http_field::cookie))
        if (const auto old = console_detail::cookie_value(
                req->header().get_field(restinio::http_field::cookie), cookie_name()))
          signed_in.close(*old);
      const auto id = signed_in.open(who.who);
      const auto* s = signed_in.find(id);
      auto r = req->create_response(restinio::status_ok());
      secure(r);
      r.append_header(restinio::http_field::set_cookie,
                      cookie_name() + "=" + id + "; Path=/; HttpOnly; SameSite=Strict" +
                          (options.secure_cookie ? "; Secure" : ""));
      r.append_header(restinio::http_field::content_type, "application/json; charset=utf-8");
      r.set_body(ojson{{"signed_in", true}, {"who", s->who}, {"csrf", s->csrf}}.dump(
          -1, ' ', false, ojson::error_handler_t::replace));
      r.done();
    } catch (const std::exception& e) {
      try {
        reply_error(req, restinio::status_service_unavailable(), e.what());
      } catch (...) {  // the client has gone
      }
    }
  }

  static asio::awaitable<void> act(std::shared_ptr<impl> self, restinio::request_handle_t req,
                                   std::string path, ojson body, console_detail::actor who) {
    auto work = [&]() -> asio::awaitable<ojson> {
      self->check_running();
      if (path == "/api/bulk")
        co_return co_await console_detail::run_bulk(
            self->eng, body, who, self->options.query_timeout, self->options.max_page,
            self->options.max_scan, [&self] { self->check_running(); });
      co_return co_await console_detail::run_action(self->eng, body, who,
                                                    self->options.query_timeout);
    };
    // A confirmed bulk run may take a while: it does not hold one of the pages' places.
    const bool long_run = path == "/api/bulk" && body.contains("confirm");
    co_await respond(self, std::move(req), work, !long_run);
  }

  // One API request: exactly one reply, whatever happens. An exception becomes the reply's
  // {"error": ...} with a status that says whose fault it is.
  static asio::awaitable<void> api(std::shared_ptr<impl> self, restinio::request_handle_t req,
                                   std::string path, console_detail::params p) {
    auto work = [&]() { return self->answer(path, p); };
    co_await respond(self, std::move(req), work);
  }

  // Holds one of the gate's places until destroyed.
  struct gate_place {
    gate_t& gate;
    explicit gate_place(gate_t& g) : gate(g) {}
    gate_place(const gate_place&) = delete;
    gate_place& operator=(const gate_place&) = delete;
    ~gate_place() { gate.leave(); }
  };

  template <class Work>
  static asio::awaitable<void> respond(std::shared_ptr<impl> self, restinio::request_handle_t req,
                                       Work& work, bool gated = true) {
    restinio::http_status_line_t status = restinio::status_ok();
    ojson body;
    try {
      // At most options.max_queries requests use the database at once; the others wait here,
      // so that open tabs cannot take the engine's pool from its workflows.
      std::optional<gate_place> place;
      if (gated) {
        co_await self->gate.enter();
        place.emplace(self->gate);
      }
      self->check_running();
      body = co_await work();
    } catch (const console_detail::conflict& e) {
      status = restinio::status_conflict();
      body = e.extra;
      body["error"] = e.what();
    } catch (const console_detail::bad_request& e) {
      status = restinio::status_bad_request();
      body = ojson{{"error", e.what()}};
    } catch (const console_detail::not_found& e) {
      status = restinio::status_not_found();
      body = ojson{{"error", e.what()}};
    } catch (const pg::sql_error& e) {
      // since, until or a cursor's time that the server cannot read (22007, 22008)
      if (dynamic_cast<const pg::invalid_datetime_format*>(&e) ||
          dynamic_cast<const pg::datetime_field_overflow*>(&e)) {
        status = restinio::status_bad_request();
        body = ojson{{"error", std::string("a time the server cannot read: ") + e.what()}};
      } else if (e.sqlstate() == "57014") {  // cancelled by the server: no answer in time
        status = restinio::status_service_unavailable();
        body = ojson{{"error", console_detail::not_answering(e, self->options.query_timeout)}};
      } else {
        status = restinio::status_internal_server_error();
        body = ojson{{"error", e.what()}};
      }
    } catch (const pg::connection_error& e) {
      status = restinio::status_service_unavailable();
      body = ojson{{"error", console_detail::not_answering(e, self->options.query_timeout)}};
    } catch (const stopped_error& e) {
      status = restinio::status_service_unavailable();
      body = ojson{{"error", e.what()}};
    } catch (const console_detail::audit_unwritten& e) {
      status = restinio::status_service_unavailable();  // nothing was done: it may be tried again
      body = ojson{{"error", e.what()}};
    } catch (const durable::invalid_text& e) {
      status = restinio::status_bad_request();
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

  // The JSON rows of `q` on connection `c`.
  template <class Conn>
  asio::awaitable<std::vector<ojson>> json_rows(Conn& c, query<store::json_value> q) {
    auto got = co_await store::fetch(c, std::move(q));
    check_running();
    std::vector<ojson> out;
    out.reserve(got.size());
    for (const auto& r : got) out.push_back(ojson::parse(r.json));
    co_return out;
  }
  template <class Conn>
  asio::awaitable<ojson> json_one(Conn& c, query<store::json_value> q) {
    auto got = co_await json_rows(c, std::move(q));
    co_return got.empty() ? ojson(nullptr) : std::move(got.front());
  }

  asio::awaitable<std::vector<ojson>> rows(query<store::json_value> q) {
    check_running();
    auto c = co_await console_detail::bounded_connection::acquire(eng, options.query_timeout);
    check_running();
    co_return co_await json_rows(*c, std::move(q));
  }

  asio::awaitable<ojson> one(query<store::json_value> q) {
    auto got = co_await rows(std::move(q));
    co_return got.empty() ? ojson(nullptr) : std::move(got.front());
  }

  asio::awaitable<ojson> answer(const std::string& path, const console_detail::params& p) {
    const auto& st = detail::store_of(eng);
    if (path == "/api/audit") {
      auto page =
          co_await console_detail::audit_page(eng, options.query_timeout, p, options.max_page);
      check_running();
      co_return page;
    }
    if (path == "/api/overview") {
      // Four statements on one connection: a refresh takes one of the pool's, not four.
      ojson out = ojson::object();
      check_running();
      auto c = co_await console_detail::bounded_connection::acquire(eng, options.query_timeout);
      check_running();
      auto stats = st.admin_stats(options.lease_s);
      out["stats"] = co_await json_one(*c, std::move(stats));
      auto queues = st.admin_queues();
      out["queues"] = co_await json_rows(*c, std::move(queues));
      auto executors = st.admin_executors(options.lease_s);
      out["executors"] = co_await json_rows(*c, std::move(executors));
      auto series = st.console_series();
      out["series"] = co_await json_one(*c, std::move(series));
      co_return out;
    }
    if (path == "/api/workflows") {
      auto f = console_detail::list_filter_of(p, options.max_page);
      const auto limit = f.limit;
      f.limit = limit + 1;  // one more: is there a next page?
      f.scan = options.max_scan;
      auto q = st.admin_list(f);
      auto found = co_await rows(std::move(q));
      co_return console_detail::list_page(std::move(found), limit, options.max_scan);
    }
    if (path == "/api/workflow") {
      const auto id = console_detail::required(p, "id");
      auto q = st.admin_show(id);
      auto found = co_await one(std::move(q));
      if (found.is_null()) throw console_detail::not_found("no workflow has the id '" + id + "'");
      co_return found;
    }
    if (path == "/api/stream") {
      const auto id = console_detail::required(p, "id");
      const auto key = console_detail::required(p, "key");
      const std::int64_t from = console_detail::offset_param(p, "from");
      auto q = st.admin_stream(id, key, from, console_detail::stream_page);
      auto found = co_await one(std::move(q));
      if (found.is_null() || found["status"].is_null())
        throw console_detail::not_found("no workflow has the id '" + id + "'");
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

std::string console_token(std::string_view text) { return console_detail::checked_token(text); }

console::console(asio::io_context& io, engine& eng, console_options options)
    : impl_((console_detail::require_scan(options.max_scan),
             std::make_shared<impl>(io, eng, std::move(options)))) {}

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
  if (!o.token.empty()) o.token = console_detail::checked_token(o.token);
  std::weak_ptr<impl> weak = impl_;
  impl_->stopped = false;
  impl_->server = std::make_unique<server_t>(
      restinio::external_io_context(impl_->io),
      restinio::server_settings_t<traits>{}
          .address(address)
          .port(o.port)
          // An idle keep-alive connection closes after this; one that
          // sends a request after stop() is answered 503 and closed.
          .read_next_http_message_timelimit(std::chrono::seconds(10))
          // A bulk action of 10 000 workflows answers when done.
          .handle_request_timeout(std::chrono::minutes(10))
          // A body over 1 MiB is answered 413 (handle_post); over 4 MiB
          // the connection is closed while it arrives (RESTinio sends no
          // answer), so that no request is held whole in memory.
          .incoming_http_msg_limits(
              restinio::incoming_http_msg_limits_t{}.max_body_size(std::uint64_t(4) << 20))
          .request_handler([weak](auto req) {
            if (auto self = weak.lock()) return self->handle(std::move(req));
            return restinio::request_rejected();
          })
          .acceptor_post_bind_hook([weak](asio::ip::tcp::acceptor& a) {
            if (auto self = weak.lock()) self->bound_port = a.local_endpoint().port();
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

// A query result with typed access to its columns.
#pragma once

#include <libpq-fe.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "durable/pg/error.hpp"
#include "durable/pg/traits.hpp"

namespace durable::pg {

class result;

/// One row of a result; cheap to copy, valid while its result lives.
class row {
public:
  row(const result& r, int index) noexcept : result_(&r), index_(index) {}

  [[nodiscard]] bool is_null(int column) const;
  [[nodiscard]] std::string_view text(int column) const;

  /// The column converted to T; T = std::optional<U> maps NULL to std::nullopt.
  template <class T>
  [[nodiscard]] T get(int column) const;

  /// The first sizeof...(T) columns as a tuple.
  template <class... T>
  [[nodiscard]] std::tuple<T...> as() const {
    return as_impl<T...>(std::index_sequence_for<T...>{});
  }

  [[nodiscard]] int index() const noexcept { return index_; }

private:
  template <class... T, std::size_t... I>
  std::tuple<T...> as_impl(std::index_sequence<I...>) const {
    return std::tuple<T...>(get<T>(int(I))...);
  }
  const result* result_;
  int index_;
};

/// Owns a PGresult.
class result {
public:
  result() = default;
  // The counts are read once: every field read checks its row and column against them.
  explicit result(PGresult* r) noexcept
      : res_(r), rows_(r ? PQntuples(r) : 0), columns_(r ? PQnfields(r) : 0) {}
  // A moved-from result is empty, as its PGresult went with the move.
  result(result&& o) noexcept
      : res_(std::move(o.res_)),
        rows_(std::exchange(o.rows_, 0)),
        columns_(std::exchange(o.columns_, 0)) {}
  result& operator=(result&& o) noexcept {
    res_ = std::move(o.res_);
    rows_ = std::exchange(o.rows_, 0);
    columns_ = std::exchange(o.columns_, 0);
    return *this;
  }

  [[nodiscard]] int rows() const noexcept { return rows_; }
  [[nodiscard]] int columns() const noexcept { return columns_; }
  [[nodiscard]] bool empty() const noexcept { return rows() == 0; }
  /// Rows affected by INSERT/UPDATE/DELETE (PQcmdTuples), 0 when not applicable.
  [[nodiscard]] long affected() const noexcept {
    if (!res_) return 0;
    const char* s = PQcmdTuples(res_.get());
    return (s && *s) ? std::strtol(s, nullptr, 10) : 0;
  }
  [[nodiscard]] std::string column_name(int c) const { return PQfname(res_.get(), c); }

  [[nodiscard]] bool is_null(int r, int c) const {
    check(r, c);
    return PQgetisnull(res_.get(), r, c) != 0;
  }
  [[nodiscard]] std::string_view text(int r, int c) const {
    check(r, c);
    return {PQgetvalue(res_.get(), r, c), std::size_t(PQgetlength(res_.get(), r, c))};
  }

  template <class T>
  [[nodiscard]] T get(int r, int c) const {
    if constexpr (is_optional<T>::value) {
      if (is_null(r, c)) return std::nullopt;
      return get<typename T::value_type>(r, c);
    } else {
      if (is_null(r, c))
        throw conversion_error("column '" + column_name(c) + "' of row " + std::to_string(r) +
                               " is NULL; read it as std::optional");
      try {
        return result_traits<T>::from_text(text(r, c));
      } catch (const conversion_error& e) {
        throw conversion_error("column '" + column_name(c) + "' of row " + std::to_string(r) +
                               ": " + e.what());
      }
    }
  }

  [[nodiscard]] row operator[](int r) const noexcept { return row(*this, r); }

  class iterator {
  public:
    iterator(const result* res, int i) noexcept : res_(res), i_(i) {}
    row operator*() const noexcept { return row(*res_, i_); }
    iterator& operator++() noexcept {
      ++i_;
      return *this;
    }
    bool operator==(const iterator& o) const noexcept { return i_ == o.i_; }

  private:
    const result* res_;
    int i_;
  };
  [[nodiscard]] iterator begin() const noexcept { return {this, 0}; }
  [[nodiscard]] iterator end() const noexcept { return {this, rows()}; }

  [[nodiscard]] PGresult* native_handle() const noexcept { return res_.get(); }

private:
  template <class T>
  struct is_optional : std::false_type {};
  template <class T>
  struct is_optional<std::optional<T>> : std::true_type {};

  void check(int r, int c) const {
    if (r < 0 || r >= rows_ || c < 0 || c >= columns_)
      throw conversion_error("result has " + std::to_string(rows()) + " rows and " +
                             std::to_string(columns()) + " columns; asked for row " +
                             std::to_string(r) + ", column " + std::to_string(c));
  }
  struct deleter {
    void operator()(PGresult* r) const noexcept { PQclear(r); }
  };
  std::unique_ptr<PGresult, deleter> res_;
  int rows_ = 0;
  int columns_ = 0;
};

inline bool row::is_null(int column) const { return result_->is_null(index_, column); }
inline std::string_view row::text(int column) const { return result_->text(index_, column); }
template <class T>
T row::get(int column) const {
  return result_->template get<T>(index_, column);
}

}  // namespace durable::pg

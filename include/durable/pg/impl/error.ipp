// The SQLSTATE to exception mapping of durable/pg/error.hpp: included at the end of that header
// when header-only, by durable/src.hpp otherwise.
#pragma once

#include <string_view>

#include "durable/pg/error.hpp"

namespace durable::pg {
namespace detail {

struct sql_error_fields {
  std::string sqlstate, server_message, statement, detail;
  int batch_index;
};

template <class E>
[[noreturn]] void raise_as(sql_error_fields& f) {
  throw E(std::move(f.sqlstate), std::move(f.server_message), std::move(f.statement),
          std::move(f.detail), f.batch_index);
}

struct sqlstate_class {
  std::string_view code;  // five characters for one condition, two for a whole class
  void (*raise)(sql_error_fields&);
};

// Exact codes first; a code not listed falls back to its class (the first two characters).
inline constexpr sqlstate_class sqlstate_classes[] = {
    {"22001", &raise_as<string_data_right_truncation>},
    {"22003", &raise_as<numeric_value_out_of_range>},
    {"22007", &raise_as<invalid_datetime_format>},
    {"22008", &raise_as<datetime_field_overflow>},
    {"22012", &raise_as<division_by_zero>},
    {"22021", &raise_as<character_not_in_repertoire>},
    {"22P02", &raise_as<invalid_text_representation>},
    {"22P05", &raise_as<untranslatable_character>},
    {"23001", &raise_as<restrict_violation>},
    {"23502", &raise_as<not_null_violation>},
    {"23503", &raise_as<foreign_key_violation>},
    {"23505", &raise_as<unique_violation>},
    {"23514", &raise_as<check_violation>},
    {"23P01", &raise_as<exclusion_violation>},
    {"25006", &raise_as<read_only_sql_transaction>},
    {"25P02", &raise_as<in_failed_sql_transaction>},
    {"25P03", &raise_as<idle_in_transaction_session_timeout>},
    {"40001", &raise_as<serialization_failure>},
    {"40003", &raise_as<statement_completion_unknown>},
    {"40P01", &raise_as<deadlock_detected>},
    {"42501", &raise_as<insufficient_privilege>},
    {"42601", &raise_as<syntax_error>},
    {"42703", &raise_as<undefined_column>},
    {"42704", &raise_as<undefined_object>},
    {"42710", &raise_as<duplicate_object>},
    {"42883", &raise_as<undefined_function>},
    {"42P01", &raise_as<undefined_table>},
    {"42P07", &raise_as<duplicate_table>},
    {"53100", &raise_as<disk_full>},
    {"53200", &raise_as<out_of_memory>},
    {"53300", &raise_as<too_many_connections>},
    {"55006", &raise_as<object_in_use>},
    {"55P03", &raise_as<lock_not_available>},
    {"57014", &raise_as<query_canceled>},
    {"57P01", &raise_as<admin_shutdown>},
    {"57P02", &raise_as<crash_shutdown>},
    {"57P03", &raise_as<cannot_connect_now>},
    {"57P04", &raise_as<database_dropped>},
    {"57P05", &raise_as<idle_session_timeout>},
    {"P0001", &raise_as<raise_exception>},
    {"08", &raise_as<connection_exception>},
    {"22", &raise_as<data_exception>},
    {"23", &raise_as<integrity_constraint_violation>},
    {"25", &raise_as<invalid_transaction_state>},
    {"3F", &raise_as<invalid_schema_name>},
    {"40", &raise_as<transaction_rollback>},
    {"42", &raise_as<syntax_error_or_access_rule_violation>},
    {"53", &raise_as<insufficient_resources>},
    {"54", &raise_as<program_limit_exceeded>},
    {"55", &raise_as<object_not_in_prerequisite_state>},
    {"57", &raise_as<operator_intervention>},
    {"58", &raise_as<system_error>},
    {"P0", &raise_as<plpgsql_error>},
    {"XX", &raise_as<internal_error>},
};

}  // namespace detail

DURABLE_DECL void throw_sql_error(std::string sqlstate, std::string server_message,
                                  std::string statement, std::string detail, int batch_index) {
  detail::sql_error_fields f{std::move(sqlstate), std::move(server_message), std::move(statement),
                             std::move(detail), batch_index};
  if (f.sqlstate.size() == 5) {
    const std::string_view state = f.sqlstate;
    for (const auto& c : detail::sqlstate_classes)
      if (c.code == state) c.raise(f);
    for (const auto& c : detail::sqlstate_classes)
      if (c.code.size() == 2 && c.code == state.substr(0, 2)) c.raise(f);
  }
  detail::raise_as<sql_error>(f);
}

DURABLE_DECL std::exception_ptr make_sql_error(std::string sqlstate, std::string server_message,
                                               std::string statement, std::string detail,
                                               int batch_index) {
  try {
    throw_sql_error(std::move(sqlstate), std::move(server_message), std::move(statement),
                    std::move(detail), batch_index);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace durable::pg

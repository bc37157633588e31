// Reading a Hugging Face config.json's fields with errors that name them: shared by the families' readers
// (hf_config.cc, hf_gemma3.cc). Internal to the models library.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "core/errors.h"
#include "core/strings.h"

namespace zb::hf {

// Field access with messages that name the field; `prefix` names the object a nested one sits in ("text_config.").
class Fields {
 public:
  explicit Fields(const nlohmann::json& j, std::string prefix = "") : j_(j), prefix_(std::move(prefix)) {}

  template <typename T>
  T required(const char* key) const {
    if (!has(key)) throw Error(cat("missing field '", name(key), "'"));
    return get<T>(key);
  }
  template <typename T>
  T optional(const char* key, T fallback) const {
    if (!has(key)) return fallback;
    return get<T>(key);
  }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  bool present(const char* key) const { return j_.contains(key); }  // null included
  const nlohmann::json& at(const char* key) const { return j_.at(key); }
  // The field's name as messages give it: the prefix and the key.
  std::string name(const char* key) const { return prefix_ + key; }
  // The object held by field `key` (throws naming it if it is not one), its fields prefixed by its name.
  Fields object(const char* key) const {
    if (!at(key).is_object()) throw Error(cat("field '", name(key), "' must be an object"));
    return Fields(at(key), name(key) + ".");
  }

 private:
  template <typename T>
  T get(const char* key) const {
    const nlohmann::json& value = j_[key];
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!value.is_number_integer()) {
        throw Error(cat("field '", name(key), "' must be an integer, not ", value.dump()));
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!value.is_number()) throw Error(cat("field '", name(key), "' must be a number, not ", value.dump()));
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!value.is_boolean()) throw Error(cat("field '", name(key), "' must be true or false, not ", value.dump()));
    } else {
      if (!value.is_string()) throw Error(cat("field '", name(key), "' must be a string, not ", value.dump()));
    }
    return value.get<T>();
  }
  const nlohmann::json& j_;
  std::string prefix_;
};

inline void require(bool ok, const std::string& what) {
  if (!ok) throw Error(cat("unsupported configuration: ", what));
}

}  // namespace zb::hf

#include "rewrite/record_fields.h"

#include <stdexcept>

namespace fxopt {

void RecordFields::malformed(const Arg& value) const {
  throw std::invalid_argument("malformed " + std::string(record_) + " record: " + to_string(value));
}

const std::vector<Arg>& RecordFields::items(const Arg& value, size_t size) const {
  const std::vector<Arg>* seq = value.sequence();
  if (!seq || (size && seq->size() != size)) malformed(value);
  return *seq;
}

const std::string& RecordFields::text(const Arg& value) const {
  if (!value.is<std::string>()) malformed(value);
  return value.as<std::string>();
}

}  // namespace fxopt

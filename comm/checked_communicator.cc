#include "comm/checked_communicator.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

// FNV-1a over the records' text: equal records give equal hashes on every rank.
uint64_t hash_of(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// One line a collective: kind, subject, bytes.
std::string serialise(const std::vector<IssuedCollective>& records) {
  std::string text;
  for (const IssuedCollective& c : records) text += cat(c.kind, ' ', c.subject, ' ', c.bytes, '\n');
  return text;
}

std::vector<IssuedCollective> parse(const std::string& text) {
  std::vector<IssuedCollective> records;
  std::istringstream in(text);
  IssuedCollective c;
  while (in >> c.kind >> c.subject >> c.bytes) records.push_back(c);
  return records;
}

}  // namespace

std::string IssuedCollective::describe() const {
  return cat(kind, subject >= 0 ? cat(" of unit ", subject) : std::string(), ", ", bytes, " bytes");
}

std::optional<CollectiveMismatch> first_mismatch(const std::vector<std::vector<IssuedCollective>>& records) {
  size_t longest = 0;
  for (const auto& r : records) longest = std::max(longest, r.size());
  const std::vector<IssuedCollective>& first = records.front();
  for (size_t i = 0; i < longest; ++i) {
    bool same = i < first.size();
    for (const auto& r : records) same = same && i < r.size() && r[i] == first[i];
    if (same) continue;
    CollectiveMismatch m{i, {}};
    for (const auto& r : records) m.issued.push_back(i < r.size() ? r[i].describe() : "nothing");
    return m;
  }
  return std::nullopt;
}

void CheckedCommunicator::record(const char* kind, size_t bytes) { issued_.push_back({kind, subject_, bytes}); }

CommTicket CheckedCommunicator::all_reduce_sum(Tensor& data) {
  record("all_reduce", data.bytes());
  return inner_.all_reduce_sum(data);
}

CommTicket CheckedCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  record("reduce_scatter", in.bytes());
  return inner_.reduce_scatter_sum(in, out);
}

CommTicket CheckedCommunicator::all_gather(const Tensor& in, Tensor& out) {
  record("all_gather", out.bytes());
  return inner_.all_gather(in, out);
}

CommTicket CheckedCommunicator::broadcast(Tensor& data, int root) {
  record("broadcast", data.bytes());
  return inner_.broadcast(data, root);
}

void CheckedCommunicator::end_step(int64_t step) {
  const std::string mine = serialise(issued_);
  issued_.clear();
  const std::vector<std::string> hashes = agreement_.all_gather(std::to_string(hash_of(mine)));
  bool agree = true;
  for (const std::string& h : hashes) agree = agree && h == hashes.front();
  if (agree) return;
  std::vector<std::vector<IssuedCollective>> records;
  for (const std::string& text : agreement_.all_gather(mine)) records.push_back(parse(text));
  const std::optional<CollectiveMismatch> m = first_mismatch(records);
  if (!m) return;  // (a hash collision of equal records cannot happen; different ones could only look equal)
  std::vector<std::string> by_rank;
  for (size_t r = 0; r < m->issued.size(); ++r) by_rank.push_back(cat("rank ", r, ": ", m->issued[r]));
  throw Error(cat("--check-collectives: at step ", step, " the ranks' collective #", m->index + 1,
                  " differs (", join(by_rank, "; "), ")"));
}

}  // namespace zb

#include "distributed/agreement.h"

#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "distributed/layout.h"

namespace flashattn::distributed {
namespace {

// A rank's record: the call's name (so that ranks in different calls notice), the field count, the length
// of its error message, then the fields.
constexpr std::size_t kNameWords = 3;
constexpr std::size_t kRecordWords = kNameWords + 2 + kMaxFields;

struct Record {
  std::span<const std::int64_t> words;
  std::string Name() const {
    char name[kNameWords * 8 + 1] = {};
    std::memcpy(name, words.data(), kNameWords * 8);
    return name;
  }
  std::int64_t FieldCount() const { return words[kNameWords]; }
  std::int64_t ErrorLength() const { return words[kNameWords + 1]; }
  std::int64_t FieldValue(std::size_t n) const { return words[kNameWords + 2 + n]; }
};

// "rank 3", "ranks 0-2, 5": the ranks in increasing order, runs collapsed.
std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream text;
  text << (ranks.size() == 1 ? "rank " : "ranks ");
  for (std::size_t n = 0; n < ranks.size();) {
    std::size_t end = n + 1;
    while (end < ranks.size() && ranks[end] == ranks[end - 1] + 1) ++end;
    if (n > 0) text << ", ";
    text << ranks[n];
    if (end - n > 1) text << "-" << ranks[end - 1];
    n = end;
  }
  return text.str();
}

// "64 on ranks 0, 2; 32 on rank 1": each distinct value with the ranks that hold it, in rank order of
// first appearance. Ranks whose value `skip` accepts are left out.
template <typename Value, typename Print, typename Skip>
std::string ValuesByRank(const std::vector<Value>& values, Print print, Skip skip) {
  std::vector<Value> distinct;
  std::vector<std::vector<int>> holders;
  for (int rank = 0; rank < static_cast<int>(values.size()); ++rank) {
    if (skip(values[rank])) continue;
    const auto found = std::find(distinct.begin(), distinct.end(), values[rank]);
    if (found == distinct.end()) {
      distinct.push_back(values[rank]);
      holders.push_back({rank});
    } else {
      holders[found - distinct.begin()].push_back(rank);
    }
  }
  std::ostringstream text;
  for (std::size_t n = 0; n < distinct.size(); ++n) {
    if (n > 0) text << "; ";
    print(text, distinct[n], RankList(holders[n]));
  }
  return text.str();
}

template <typename Value>
bool Never(const Value&) {
  return false;
}

template <typename Value>
void PrintOnRanks(std::ostream& out, const Value& value, const std::string& ranks) {
  out << value << " on " << ranks;
}

// "the ranks disagree on head_dim (64 on ranks 0, 2; 32 on rank 1)", one per field that differs.
std::vector<std::string> Disagreements(std::span<const Field> fields, const std::vector<Record>& records) {
  std::vector<std::string> disagreements;
  for (std::size_t n = 0; n < fields.size(); ++n) {
    std::vector<std::int64_t> values;
    for (const Record& record : records) values.push_back(record.FieldValue(n));
    if (std::all_of(values.begin(), values.end(), [&](std::int64_t value) { return value == values[0]; })) continue;
    const Field::Kind kind = fields[n].kind;
    auto print = [kind](std::ostream& out, std::int64_t value, const std::string& ranks) {
      if (kind == Field::Kind::kFloat) {
        PrintOnRanks(out, std::bit_cast<float>(static_cast<std::uint32_t>(value)), ranks);
      } else {
        PrintOnRanks(out, value, ranks);
      }
    };
    disagreements.push_back(std::string("the ranks disagree on ") + fields[n].name + " (" +
                            ValuesByRank(values, print, Never<std::int64_t>) + ")");
  }
  return disagreements;
}

std::vector<std::string> GatherErrors(const CallComm& comm, const std::vector<Record>& records,
                                      const std::string& local_error) {
  std::vector<int> counts, displacements;
  int total = 0;
  for (const Record& record : records) {
    counts.push_back(static_cast<int>(record.ErrorLength()));
    displacements.push_back(total);
    total += counts.back();
  }
  auto text = std::make_shared<std::vector<char>>(static_cast<std::size_t>(std::max(total, 1)));
  auto mine = std::make_shared<std::string>(local_error);
  MPI_Request request;
  comm.Check(MPI_Iallgatherv(mine->data(), static_cast<int>(mine->size()), MPI_CHAR, text->data(), counts.data(),
                             displacements.data(), MPI_CHAR, comm.get(), &request),
             "MPI_Iallgatherv of the error messages");
  WaitCollective(comm, request, {text, mine}, "the other ranks' error messages");
  std::vector<std::string> errors;
  for (std::size_t rank = 0; rank < records.size(); ++rank)
    errors.emplace_back(text->data() + displacements[rank], static_cast<std::size_t>(counts[rank]));
  return errors;
}

}  // namespace

Field FloatField(const char* name, float value) {
  return Field{name, static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(value)), Field::Kind::kFloat};
}

std::vector<std::int64_t> GatherValues(const CallComm& comm, std::span<const std::int64_t> values,
                                       std::string_view what) {
  auto mine = std::make_shared<std::vector<std::int64_t>>(values.begin(), values.end());
  auto all = std::make_shared<std::vector<std::int64_t>>(values.size() * static_cast<std::size_t>(comm.size()));
  MPI_Request request;
  comm.Check(MPI_Iallgather(mine->data(), static_cast<int>(mine->size()), MPI_INT64_T, all->data(),
                            static_cast<int>(mine->size()), MPI_INT64_T, comm.get(), &request),
             "MPI_Iallgather");
  WaitCollective(comm, request, {mine, all}, what);
  return *all;
}

namespace {

// Gathers every rank's `values` (as int64 words: a float's bits, or an integer) and throws on every rank
// naming the first element that differs. `value_of` turns a word back into the value to print.
template <typename Value, typename ValueOf>
void AgreeOnWords(const CallComm& comm, const char* name, const std::vector<std::int64_t>& words, ValueOf value_of) {
  const std::vector<std::int64_t> all = GatherValues(comm, words, std::string("the other ranks' ") + name);
  for (std::size_t n = 0; n < words.size(); ++n) {
    std::vector<Value> element;
    bool differs = false;
    for (int rank = 0; rank < comm.size(); ++rank) {
      const std::int64_t word = all[rank * words.size() + n];
      differs = differs || word != words[n];
      element.push_back(value_of(word));
    }
    if (differs) {
      Fail(comm.call(), ": the ranks disagree on ", name, "[", n, "] (",
           ValuesByRank(element, PrintOnRanks<Value>, Never<Value>), ")");
    }
  }
}

}  // namespace

void AgreeOnValues(const CallComm& comm, const char* name, std::span<const float> values) {
  std::vector<std::int64_t> bits;
  for (float value : values) bits.push_back(std::bit_cast<std::uint32_t>(value));
  AgreeOnWords<float>(comm, name, bits,
                      [](std::int64_t word) { return std::bit_cast<float>(static_cast<std::uint32_t>(word)); });
}

void AgreeOnValues(const CallComm& comm, const char* name, std::span<const std::int32_t> values) {
  AgreeOnWords<std::int64_t>(comm, name, std::vector<std::int64_t>(values.begin(), values.end()),
                             [](std::int64_t word) { return word; });
}

void AgreeOnSinks(const CallComm& comm, const float* sinks, std::int64_t heads_q, const char* name) {
  if (sinks != nullptr) AgreeOnValues(comm, name, {sinks, static_cast<std::size_t>(heads_q)});
}

void AgreeOrThrow(const CallComm& comm, std::span<const Field> fields, const std::string& local_error) {
  if (fields.size() > kMaxFields) Fail(comm.call(), ": ", fields.size(), " fields, more than ", kMaxFields);
  std::vector<std::int64_t> mine(kRecordWords, 0);
  std::memcpy(mine.data(), comm.call().data(), std::min(comm.call().size(), kNameWords * 8));
  mine[kNameWords] = static_cast<std::int64_t>(fields.size());
  mine[kNameWords + 1] = static_cast<std::int64_t>(local_error.size());
  for (std::size_t n = 0; n < fields.size(); ++n) mine[kNameWords + 2 + n] = fields[n].value;
  const std::vector<std::int64_t> all = GatherValues(comm, mine, "the other ranks' parameters");

  std::vector<Record> records;
  for (int rank = 0; rank < comm.size(); ++rank)
    records.push_back(Record{std::span(all).subspan(static_cast<std::size_t>(rank) * kRecordWords, kRecordWords)});

  std::vector<std::string> names;
  for (const Record& record : records) names.push_back(record.Name());
  if (std::any_of(names.begin(), names.end(), [&](const std::string& name) { return name != names[0]; })) {
    Fail(comm.call(), ": the ranks are in different calls (",
         ValuesByRank(names, PrintOnRanks<std::string>, Never<std::string>), ")");
  }
  std::vector<std::string> problems = Disagreements(fields, records);
  if (std::any_of(records.begin(), records.end(), [](const Record& r) { return r.ErrorLength() > 0; })) {
    problems.push_back(ValuesByRank(
        GatherErrors(comm, records, local_error),
        [](std::ostream& out, const std::string& error, const std::string& ranks) {
          out << "invalid input on " << ranks << ": " << error;
        },
        [](const std::string& error) { return error.empty(); }));
  }
  if (!problems.empty()) {
    std::ostringstream message;
    for (std::size_t n = 0; n < problems.size(); ++n) message << (n ? "; " : "") << problems[n];
    Fail(comm.call(), ": ", message.str());
  }
}

}  // namespace flashattn::distributed

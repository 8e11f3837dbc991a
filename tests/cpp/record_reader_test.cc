// RecordReader and RecordField: every typed getter, and every way a stored value can fail to
// fit, which must all be the one RecordError naming the node, the record and the field.
#include <gtest/gtest.h>

#include <functional>

#include "graph_builder.h"
#include "rewrite/capture.h"
#include "rewrite/marks.h"

namespace fxopt {
namespace {

using testing::GraphBuilder;

class RecordReaderTest : public ::testing::Test {
 protected:
  // A reader of `record` stored on node "fc" as the record of "Pass-1a2b".
  RecordReader read(const Record& record) { return RecordReader(*fc_, kName, record.to_arg()); }

  // Runs `read_field` and returns the RecordError it throws; fails the test if it throws none.
  RecordError error_of(const std::function<void()>& read_field) {
    try {
      read_field();
    } catch (const RecordError& e) {
      return e;
    }
    ADD_FAILURE() << "no RecordError";
    return RecordError(*fc_, kName, "", "");
  }

  static constexpr std::string_view kName = "Pass-1a2b";
  Program program_;
  GraphBuilder b_{program_.graph};
  Node* x_ = b_.input("x");
  Node* fc_ = b_.call("fc", "torch.relu", {x_});
};

TEST_F(RecordReaderTest, TypedGetters) {
  RecordReader r = read(Record()
                            .set("flag", true)
                            .set("count", 7)
                            .set("path", "fc.weight")
                            .set("none", None{})
                            .set("kind", "call_module")
                            .set("input", "x")
                            .set("pairs", Tuple{{Tuple{{Arg("a"), Arg(1)}}, Tuple{{Arg("b"), 2}}}})
                            .set("kwargs", Dict{{{"dim", -1}}})
                            .set("divisor", 4.5));
  EXPECT_TRUE(r.at("flag").boolean());
  EXPECT_EQ(r.at("count").integer(), 7);
  EXPECT_EQ(r.at("count").index(8), 7u);
  EXPECT_EQ(r.at("path").text(), "fc.weight");
  EXPECT_EQ(*r.at("path").optional_text(), "fc.weight");
  EXPECT_EQ(r.at("none").optional_text(), nullptr);
  EXPECT_TRUE(r.at("none").is_none());
  EXPECT_EQ(r.at("kind").kind(), NodeKind::CallModule);
  EXPECT_EQ(r.at("input").node(program_.graph), x_);
  std::vector<RecordField> pairs = r.at("pairs").items(2);
  EXPECT_EQ(pairs[1].items(2)[0].text(), "b");
  EXPECT_EQ(pairs[1].items(2)[1].path(), "pairs[1][1]");
  EXPECT_EQ(r.at("pairs").items().size(), 2u);
  EXPECT_EQ(r.at("kwargs").dict(), (Dict{{{"dim", -1}}}));
  EXPECT_EQ(r.at("divisor").value(), Arg(4.5));
  EXPECT_EQ(r.at("divisor").path(), "divisor");
  EXPECT_EQ(&r.node(), fc_);
}

// A typed key writes a value and reads the same value back, in the form the plain fields had
// (so records saved before the keys existed still read), and fails as a plain field does.
TEST_F(RecordReaderTest, TypedKeysRoundTrip) {
  constexpr RecordKey<bool> kFlag{"flag"};
  constexpr RecordKey<int64_t> kCount{"count"};
  constexpr RecordKey<std::string> kPath{"path"};
  constexpr RecordKey<std::optional<std::string>> kCreated{"created"}, kNone{"none"};
  constexpr RecordKey<NodeKind> kKind{"kind"};
  constexpr RecordKey<Symbol> kTarget{"target"};
  constexpr RecordKey<std::vector<std::string>> kPaths{"paths"};
  constexpr RecordKey<std::vector<Node*>> kReads{"reads"};
  constexpr RecordKey<Arg> kDivisor{"divisor"};
  Record record;
  record.set(kFlag, true)
      .set(kCount, 7)
      .set(kPath, "fc.weight")
      .set(kCreated, "fc.weight_t")
      .set(kNone, std::nullopt)
      .set(kKind, NodeKind::CallModule)
      .set(kTarget, Symbol::intern("torch.relu"))
      .set(kPaths, {"a", "b"})
      .set(kReads, {x_, fc_})
      .set(kDivisor, 4.5);
  EXPECT_EQ(record.to_arg(), Record()
                                 .set("flag", true)
                                 .set("count", 7)
                                 .set("path", "fc.weight")
                                 .set("created", "fc.weight_t")
                                 .set("none", None{})
                                 .set("kind", "call_module")
                                 .set("target", "torch.relu")
                                 .set("paths", Tuple{{Arg("a"), Arg("b")}})
                                 .set("reads", Tuple{{Arg("x"), Arg("fc")}})
                                 .set("divisor", 4.5)
                                 .to_arg());
  RecordReader r = read(record);
  EXPECT_TRUE(r.get(kFlag));
  EXPECT_EQ(r.get(kCount), 7);
  EXPECT_EQ(r.get(kPath), "fc.weight");
  EXPECT_EQ(*r.get(kCreated), "fc.weight_t");
  EXPECT_EQ(r.get(kNone), nullptr);
  EXPECT_EQ(r.get(kKind), NodeKind::CallModule);
  EXPECT_EQ(r.get(kTarget), Symbol::intern("torch.relu"));
  EXPECT_EQ(r.get(kPaths), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.get(kReads, program_.graph), (std::vector<Node*>{x_, fc_}));
  EXPECT_EQ(r.get(kDivisor).value(), Arg(4.5));
  EXPECT_EQ(r.find(kCount), std::optional<int64_t>(7));
  EXPECT_FALSE(r.find(RecordKey<int64_t>{"missing"}).has_value());
  EXPECT_EQ(error_of([&] { r.get(RecordKey<int64_t>{"path"}); }).field(), "path");
  EXPECT_EQ(error_of([&] { r.get(RecordKey<bool>{"missing"}); }).field(), "missing");
}

TEST_F(RecordReaderTest, OptionalFields) {
  RecordReader r = read(Record().set("start", 0));
  EXPECT_FALSE(r.find("ties").has_value());
  ASSERT_TRUE(r.find("start").has_value());
  EXPECT_EQ(r.find("start")->integer(), 0);
}

TEST_F(RecordReaderTest, EveryMismatchIsOneErrorNamingNodeRecordAndField) {
  RecordReader r = read(Record()
                            .set("count", "seven")
                            .set("flag", 1)
                            .set("path", 3)
                            .set("kind", "call_nothing")
                            .set("input", "gone")
                            .set("pair", Tuple{{Arg(1), Arg(2), Arg(3)}})
                            .set("scalar", 2.5)
                            .set("position", 9));
  struct Case {
    std::function<void()> read;
    std::string field, problem;
  };
  const Case cases[] = {
      {[&] { r.at("missing"); }, "missing", "is missing"},
      {[&] { r.at("count").integer(); }, "count", "is not an integer ('seven')"},
      {[&] { r.at("flag").boolean(); }, "flag", "is not a bool (1)"},
      {[&] { r.at("path").text(); }, "path", "is not a string (3)"},
      {[&] { r.at("path").optional_text(); }, "path", "is neither a string nor None (3)"},
      {[&] { r.at("kind").kind(); }, "kind", "is not a node kind ('call_nothing')"},
      {[&] { r.at("input").node(program_.graph); }, "input", "names no node of the graph ('gone')"},
      {[&] { r.at("pair").items(2); }, "pair", "does not hold 2 items ((1, 2, 3))"},
      {[&] { r.at("scalar").items(); }, "scalar", "is not a tuple (2.5)"},
      {[&] { r.at("scalar").dict(); }, "scalar", "is not a dict (2.5)"},
      {[&] { r.at("pair").items(3)[2].text(); }, "pair[2]", "is not a string (3)"},
      {[&] { r.at("position").index(9); }, "position", "is not a position below 9 (9)"},
      {[&] { r.at("scalar").fail("is not a known form"); }, "scalar", "is not a known form (2.5)"},
  };
  for (const Case& c : cases) {
    RecordError e = error_of(c.read);
    EXPECT_EQ(e.node(), "fc");
    EXPECT_EQ(e.record(), kName);
    EXPECT_EQ(e.field(), c.field);
    EXPECT_EQ(std::string(e.what()), "node 'fc': reversal record Pass-1a2b does not fit: field '" +
                                         c.field + "' " + c.problem);
  }
}

TEST_F(RecordReaderTest, ARecordThatIsNotPairsFailsTheSameWay) {
  RecordError whole = error_of([&] { RecordReader(*fc_, kName, Arg(5)); });
  EXPECT_EQ(whole.field(), "");
  EXPECT_EQ(std::string(whole.what()),
            "node 'fc': reversal record Pass-1a2b does not fit: is not a tuple (5)");
  RecordError entry = error_of([&] {
    RecordReader(*fc_, kName, Tuple{{Tuple{{Arg("k"), Arg(1)}}, Arg(5)}});
  });
  EXPECT_EQ(entry.field(), "#1");
  EXPECT_EQ(std::string(entry.what()),
            "node 'fc': reversal record Pass-1a2b does not fit: field '#1' is not a (key, value) "
            "pair (5)");
}

TEST_F(RecordReaderTest, LongValuesAreShortenedInTheMessage) {
  Tuple many;
  for (int i = 0; i < 200; ++i) many.items.emplace_back(i);
  RecordReader r = read(Record().set("nodes", many));
  RecordError e = error_of([&] { r.at("nodes").text(); });
  EXPECT_LT(std::string(e.what()).size(), 250u);
  EXPECT_EQ(std::string(e.what()).substr(std::string(e.what()).size() - 4), "...)");
}

// The reader keeps its own copy: reverse may rewrite the node's metadata while reading.
TEST_F(RecordReaderTest, OutlivesTheNodesMetadata) {
  EditLog log;
  Rewriter rw(program_, log);
  set_reversal_record(rw, fc_, kName, Record().set("path", "fc.weight"));
  std::optional<RecordReader> r = reversal_record(*fc_, kName);
  ASSERT_TRUE(r.has_value());
  RecordField path = r->at("path");
  clear_reversal_record(rw, fc_, kName);
  EXPECT_EQ(path.text(), "fc.weight");
}

// Captured values are read through the same fields: a bad one names its path in the record.
TEST_F(RecordReaderTest, CapturedValuesFailWithTheirPath) {
  EditLog log;
  Rewriter rw(program_, log);
  Node* out = b_.output(fc_);
  Node* const inputs[] = {x_};
  RecordReader r = read(
      Record()
          .set("args", Tuple{{Arg("fxopt.tuple"), Tuple{{Tuple{{Arg("fxopt.input"), Arg(4)}}}}}})
          .set("kwargs", Tuple{{Arg("fxopt.dict"), Tuple{}}})
          .set("nodes", Tuple{}));
  RecordError e = error_of([&] { rebuild_inputs(rw, out, r.at("args"), r.at("kwargs"), inputs); });
  EXPECT_EQ(e.field(), "args[1][0][1]");
  EXPECT_EQ(
      std::string(e.what()),
      "node 'fc': reversal record Pass-1a2b does not fit: field 'args[1][0][1]' is not a position "
      "below 1 (4)");
  EXPECT_EQ(
      error_of([&] { rebuild_inputs(rw, out, r.at("kwargs"), r.at("kwargs"), inputs); }).field(),
      "kwargs");
  EXPECT_EQ(error_of([&] { rebuild_nodes(rw, out, r.at("nodes"), inputs); }).field(), "nodes");
  EXPECT_TRUE(log.empty());
}

}  // namespace
}  // namespace fxopt

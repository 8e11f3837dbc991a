#include <gtest/gtest.h>

#include "graph_builder.h"
#include "rewrite/marks.h"
#include "rewrite/rewriter.h"

namespace fxopt {
namespace {

using testing::GraphBuilder;

class ApplicationsTest : public ::testing::Test {
 protected:
  Program program;
  EditLog edits;
  GraphBuilder b{program.graph};
  Rewriter rewriter{program, edits};
};

TEST_F(ApplicationsTest, TheFirstApplicationSignsPlainlyTheLaterOnesNumbered) {
  EXPECT_EQ(application_signature("Fuse-ab12", 1), "Fuse-ab12");
  EXPECT_EQ(application_signature("Fuse-ab12", 2), "Fuse-ab12@2");
  EXPECT_EQ(application_signature("Fuse-ab12", 11), "Fuse-ab12@11");
}

TEST_F(ApplicationsTest, TheLatestApplicationIsTheHighestOnAnyMarkOrRecord) {
  Node* x = b.input("x");
  Node* relu = b.call("relu", "aten.relu.default", {x});
  Node* out = b.output(relu);
  EXPECT_EQ(latest_application(program.graph, "Fuse-ab12"), 0);

  mark(rewriter, relu, "Fuse-ab12");
  EXPECT_EQ(latest_application(program.graph, "Fuse-ab12"), 1);
  // A record alone counts too: the driver's run records on the output node carry no mark.
  set_reversal_record(rewriter, out, "Fuse-ab12@3", Record().set("k", Arg(int64_t{1})));
  EXPECT_EQ(latest_application(program.graph, "Fuse-ab12"), 3);
  mark(rewriter, x, "Fuse-ab12@2");
  EXPECT_EQ(latest_application(program.graph, "Fuse-ab12"), 3);
}

TEST_F(ApplicationsTest, OtherTransformationsMarksAreNotApplications) {
  Node* x = b.input("x");
  Node* relu = b.call("relu", "aten.relu.default", {x});
  b.output(relu);
  // Another signature that starts alike, and names that only look numbered.
  for (const char* other : {"Fuse-ab123", "Fuse-ab12@", "Fuse-ab12@2x", "Fuse-ab12#2", "Fuse"})
    mark(rewriter, relu, other);
  EXPECT_EQ(latest_application(program.graph, "Fuse-ab12"), 0);
  EXPECT_FALSE(is_marked_by_any_application(*relu, "Fuse-ab12"));

  mark(rewriter, relu, "Fuse-ab12@2");
  EXPECT_TRUE(is_marked_by_any_application(*relu, "Fuse-ab12"));
  EXPECT_FALSE(is_marked(*relu, "Fuse-ab12"));
  EXPECT_FALSE(is_marked_by_any_application(*x, "Fuse-ab12"));
}

}  // namespace
}  // namespace fxopt

// The base of every built-in transformation and the driver that runs one.
//
// A pass names the (kind, target) pairs it fires on; the driver takes candidates from the
// graph's index in graph order and hands them to `rewrite` one at a time. (A pass about the
// graph as a whole, such as dead-code elimination, asks for every node once instead.) Reverse
// visits the nodes that carry the pass's reversal record. Either direction reports what changed
// and, for each candidate it left alone, why.
//
// Removing nodes goes through PassContext::remove, which the driver makes reversible for every
// pass alike (rewrite/removal.h): the removals of each run are recorded on the output node, and
// reverse puts the latest run's back, last first, after the pass's other records went to
// `restore` (the output node comes last). The same record says where every other node a run
// erased stood (rewrite/placement.h); once the reverse is done, the nodes it recreated go back
// there with the marks and records other transformations left on them.
//
// Each application of a transformation to a graph it changed before signs its own marks and
// records (rewrite/marks.h), and reverse undoes the latest application: applications come off
// in the reverse of the order they went on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/trigger.h"
#include "rewrite/edit_log.h"
#include "rewrite/marks.h"
#include "rewrite/pass_error.h"
#include "rewrite/rewriter.h"
#include "tensor/tensor_ops.h"
#include "tuning/chooser.h"

namespace fxopt {

struct Skip {
  std::string node;
  std::string reason;
};

// A kernel choice a pass made for one node, for its report.
struct ChoiceMade {
  std::string node;
  std::string op;
  std::string picked;
  double ratio;  // the pick's measured time over the unchanged op's (1 if unmeasured)
  std::string how;
};

struct PassResult {
  std::vector<std::string> changed;  // names of the nodes the pass changed or created
  std::vector<Skip> skipped;
  std::vector<ChoiceMade> choices;
};

struct PassContext {
  Rewriter& rewriter;
  TensorOps& tensors;
  Chooser& chooser;
  const std::string& signature;       // this application's (rewrite/marks.h): marks, records
  const std::string& transformation;  // every application's: the transformation's own
  PassResult result;

  // Records the change in the result and marks the node with this application's signature.
  void changed(Node* node);
  // Whether this transformation changed `node`, in this application or an earlier one.
  bool marked(const Node& node) const { return is_marked_by_any_application(node, transformation); }
  // Records a node that reverse put back; reverse leaves no mark.
  void restored(Node* node) { result.changed.push_back(node->name()); }
  void skip(const Node& node, std::string reason);
  // Asks the chooser which of query.candidates to emit for `node` and records the answer in
  // the result; returns the picked candidate's name.
  std::string choose(const Node& node, const ChoiceQuery& query);
  // Makes the users of `node` read `replacement` (nullptr: it must have none), erases it and
  // records it as changed; reverse puts it back exactly (rewrite/removal.h).
  void remove(Node* node, Node* replacement = nullptr);

  std::vector<Arg> removals;    // captured removals of this run, in order; the driver stores them
  std::vector<Arg> placements;  // where the nodes this run erased stood, in order
};

// Which nodes the driver hands to Pass::rewrite.
enum class Visit : uint8_t {
  Triggers,           // the nodes triggers() names, in graph order
  AllNodes,           // every node once, in graph order: O(n) per run, for whole-graph passes
  AllNodesBackwards,  // every node once, last first: users come before the values they read
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::vector<Trigger> triggers() const = 0;
  virtual Visit visit() const { return Visit::Triggers; }
  // Called once before the first candidate of each forward run: the place for an O(n) analysis
  // of the whole graph a pass needs (never per candidate). Its results live in mutable members.
  virtual void begin(const Program&) const {}
  // Rewrites one candidate, or calls ctx.skip with the reason it does not apply.
  virtual void rewrite(PassContext& ctx, Node* candidate) const = 0;
  // Undoes what `rewrite` did to `node` from the record it left there.
  virtual void restore(PassContext& ctx, Node* node, const RecordReader& record) const;
};

// Runs `pass` forward (or in reverse) over the whole program, logging every edit to `log`.
// Kernel choices go to `chooser` (by default each pass's static fallback).
PassResult run_pass(const Pass& pass, Program& program, EditLog& log, TensorOps& tensors,
                    const std::string& signature, bool reverse,
                    Chooser& chooser = static_chooser());

}  // namespace fxopt

// Shorthand for building core graphs in tests, in the shape torch.fx would produce.
#pragma once

#include <string>

#include "ir/program.h"

namespace fxopt::testing {

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& graph) : graph_(graph) {}

  Node* input(const std::string& name) {
    return graph_.append(NodeKind::Placeholder, Symbol::intern(name), name);
  }
  Node* call(const std::string& name, const std::string& target, Args args, Kwargs kwargs = {}) {
    return graph_.append(NodeKind::CallFunction, Symbol::intern(target), name, std::move(args),
                         std::move(kwargs));
  }
  Node* method(const std::string& name, const std::string& target, Args args, Kwargs kwargs = {}) {
    return graph_.append(NodeKind::CallMethod, Symbol::intern(target), name, std::move(args),
                         std::move(kwargs));
  }
  Node* module(const std::string& name, const std::string& path, Args args) {
    return graph_.append(NodeKind::CallModule, Symbol::intern(path), name, std::move(args));
  }
  Node* attr(const std::string& name, const std::string& path) {
    return graph_.append(NodeKind::GetAttr, Symbol::intern(path), name);
  }
  Node* output(Arg value) {
    return graph_.append(NodeKind::Output, Symbol::intern("output"), "output", {std::move(value)});
  }

 private:
  Graph& graph_;
};

}  // namespace fxopt::testing

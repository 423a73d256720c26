#pragma once
// Parsing of the Jinja subset that Hugging Face chat templates use: text, {{ expr }}, {% if %},
// {% for %} (with loop.*), {% set %} (names and namespace attributes), comments, whitespace control
// (-), and Hugging Face's environment settings trim_blocks and lstrip_blocks. Expressions cover
// literals, lists and dicts, attribute and item access, slices, calls, filters, tests, arithmetic,
// comparisons, `in`, `~`, and/or/not and the inline if-else. Anything else is a template_error
// naming the construct, raised when the template is parsed.
#include "gpu/chat_template_value.hpp"

#include <memory>
#include <string>
#include <vector>

namespace dls::gpu::jinja {

struct expr {
  enum class kind { literal, name, member, index, slice, call, filter, test, unary, binary, conditional, list, dict };
  kind k;
  value literal;
  std::string name;  // name, member, filter, test, operator
  std::vector<std::unique_ptr<expr>> args;  // operands; for slice: object, start, stop, step (null = absent)
  std::vector<std::string> keywords;        // call/filter: the keyword of each trailing arg ("" positional)
  bool negated = false;                     // test: `is not`
};
using expr_ptr = std::unique_ptr<expr>;

struct node {
  enum class kind { text, output, if_, for_, set };
  kind k;
  std::string text;
  expr_ptr e;                       // output, if condition, for iterable, set value
  std::vector<std::string> targets;  // for: loop variable names; set: name, or namespace + attribute
  std::vector<node> body, orelse;   // if: then/else (elif nests in orelse); for: body
};

/// Parses `source`; throws template_error naming the first unsupported or malformed construct.
std::vector<node> parse_template(const std::string& source);

}  // namespace dls::gpu::jinja

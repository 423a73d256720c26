#include "gpu/chat_template_syntax.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

namespace dls::gpu::jinja {

namespace {

[[noreturn]] void fail(const std::string& what) { throw template_error("chat template: " + what); }

// Python's str.splitlines() separators, which Jinja's lexer turns into "\n" before anything else.
std::string normalize_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else if (c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) {
      out += '\n';
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      out += '\n';
      ++i;
    } else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      out += '\n';
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// ---- segmenting: text and tags, with Jinja's whitespace control ----

struct segment {
  enum class kind { text, output, block } k;
  std::string body;  // text, or the tag's inner source
};

std::vector<segment> segment_source(const std::string& raw) {
  std::string src = normalize_newlines(raw);
  if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline=False
  std::vector<segment> out;
  std::size_t pos = 0;
  bool line_starting = true;
  std::string text;
  while (pos <= src.size()) {
    std::size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && std::strchr("{%#", src[open + 1]) == nullptr)
      open = src.find('{', open + 1);
    if (open == std::string::npos || open + 1 >= src.size()) {
      text += src.substr(pos);
      break;
    }
    text += src.substr(pos, open - pos);
    const char kind = src[open + 1];
    const char close = kind == '{' ? '}' : kind;
    std::size_t inner = open + 2;
    const char mod = inner < src.size() ? src[inner] : '\0';
    if (mod == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
      ++inner;
    } else if (mod == '+') {
      ++inner;
    } else if (kind != '{') {  // lstrip_blocks
      const std::size_t nl = text.rfind('\n');
      const std::size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || line_starting) &&
          std::all_of(text.begin() + static_cast<std::ptrdiff_t>(from), text.end(), [](char c) { return is_space(c); }))
        text.erase(from);
    }
    // Find the tag's end, skipping string literals (which may contain the closing characters).
    std::size_t end = std::string::npos;
    if (kind == '#') {
      end = src.find("#}", inner);
    } else {
      char quote = 0;
      for (std::size_t i = inner; i + 1 < src.size(); ++i) {
        if (quote) {
          if (src[i] == '\\') ++i;
          else if (src[i] == quote) quote = 0;
        } else if (src[i] == '\'' || src[i] == '"') {
          quote = src[i];
        } else if (src[i] == close && src[i + 1] == '}') {
          end = i;
          break;
        }
      }
    }
    if (end == std::string::npos) fail(std::string("unterminated '{") + kind + "' tag");
    std::size_t body_end = end;
    bool strip_after = false;
    if (body_end > inner && src[body_end - 1] == '-') {
      strip_after = true;
      --body_end;
    } else if (body_end > inner && src[body_end - 1] == '+') {
      --body_end;
    }
    if (!text.empty()) out.push_back({segment::kind::text, text});
    text.clear();
    if (kind != '#') out.push_back({kind == '{' ? segment::kind::output : segment::kind::block, src.substr(inner, body_end - inner)});
    pos = end + 2;
    std::size_t consumed_from = pos;
    if (strip_after) {
      while (pos < src.size() && is_space(src[pos])) ++pos;
    } else if (kind != '{' && pos < src.size() && src[pos] == '\n') {  // trim_blocks
      ++pos;
    }
    line_starting = pos > consumed_from && src[pos - 1] == '\n';
  }
  if (!text.empty()) out.push_back({segment::kind::text, text});
  return out;
}

// ---- expression tokens ----

struct token {
  enum class kind { name, string, integer, op, end } k;
  std::string text;
  int64_t number = 0;
};

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<token> tokenize(const std::string& s) {
  std::vector<token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_space(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({token::kind::name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      if (j < s.size() && (s[j] == '.' || s[j] == 'e' || s[j] == 'E') && j + 1 < s.size() &&
          std::isdigit(static_cast<unsigned char>(s[j + 1])))
        fail("floating-point literals are not supported");
      token t{token::kind::integer, s.substr(i, j - i)};
      try {
        t.number = std::stoll(t.text);
      } catch (const std::exception&) {
        fail("integer literal " + t.text + " is too large");
      }
      out.push_back(t);
      i = j;
    } else if (c == '\'' || c == '"') {
      // Jinja decodes literals with Python's unicode-escape.
      std::string v;
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\') {
          v += s[j];
          continue;
        }
        if (++j >= s.size()) break;
        const char e = s[j];
        auto hex = [&](int n) {
          if (j + static_cast<std::size_t>(n) >= s.size()) fail("truncated escape in a string literal");
          uint32_t cp = 0;
          for (int d = 1; d <= n; ++d) {
            const char h = s[j + static_cast<std::size_t>(d)];
            if (!std::isxdigit(static_cast<unsigned char>(h)))
              fail(std::string("escape '\\") + e + "' in a string literal needs " + std::to_string(n) + " hex digits");
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
          }
          if (cp > 0x10FFFF) fail("escape in a string literal is beyond the last Unicode code point U+10FFFF");
          j += static_cast<std::size_t>(n);
          append_utf8(v, cp);
        };
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          case '\n': break;
          case 'x': hex(2); break;
          case 'u': hex(4); break;
          case 'U': hex(8); break;
          default: fail(std::string("escape '\\") + e + "' in a string literal is not supported");
        }
      }
      if (j >= s.size()) fail("unterminated string literal");
      out.push_back({token::kind::string, v});
      i = j + 1;
    } else {
      static const char* ops2[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* o : ops2)
        if (s.compare(i, 2, o) == 0) op = o;
      if (op.size() == 1 && std::strchr("+-*/%~<>()[]{},.:|=", c) == nullptr)
        fail(std::string("unexpected character '") + c + "' in a tag");
      out.push_back({token::kind::op, op});
      i += op.size();
    }
  }
  out.push_back({token::kind::end, ""});
  return out;
}

// ---- expressions ----

const std::set<std::string> known_filters = {"trim", "length", "count", "tojson", "string", "lower", "upper",
                                              "default", "d", "join", "first", "last", "list"};
const std::set<std::string> known_tests = {"defined", "undefined", "none", "string", "number", "integer", "boolean",
                                            "true", "false", "mapping", "sequence", "iterable", "odd", "even"};

// Nesting deeper than any real template, and shallow enough for the recursive parser's stack.
constexpr int max_nesting = 100;

class nesting_guard {
 public:
  explicit nesting_guard(int& depth) : depth_(depth) {
    if (++depth_ > max_nesting) fail("nesting deeper than " + std::to_string(max_nesting) + " levels");
  }
  ~nesting_guard() { --depth_; }
  nesting_guard(const nesting_guard&) = delete;
  nesting_guard& operator=(const nesting_guard&) = delete;

 private:
  int& depth_;
};

class expr_parser {
 public:
  explicit expr_parser(std::vector<token> t) : t_(std::move(t)) {}

  const token& peek(std::size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().k == token::kind::op && peek().text == op; }
  bool at_name(const char* n) const { return peek().k == token::kind::name && peek().text == n; }
  bool at_end() const { return peek().k == token::kind::end; }
  token next() { return t_[std::min(p_++, t_.size() - 1)]; }
  void expect_op(const char* op) {
    if (!at_op(op)) fail(std::string("expected '") + op + "' but found '" + peek().text + "'");
    ++p_;
  }
  std::string expect_name() {
    if (peek().k != token::kind::name) fail("expected a name but found '" + peek().text + "'");
    return next().text;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + peek().text + "' in a tag");
  }

  /// An expression without the inline if-else (a for loop's iterable, where 'if' starts a filter).
  expr_ptr plain_expression() { return or_expr(); }

  expr_ptr expression() {
    nesting_guard guard(depth_);
    expr_ptr e = or_expr();
    while (at_name("if")) {
      ++p_;
      auto cond = or_expr();
      expr_ptr other;
      if (at_name("else")) {
        ++p_;
        other = expression();
      } else {
        other = literal(value::undefined());
      }
      auto c = make(expr::kind::conditional);
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

 private:
  static expr_ptr make(expr::kind k, std::string name = {}) {
    auto e = std::make_unique<expr>();
    e->k = k;
    e->name = std::move(name);
    return e;
  }
  static expr_ptr literal(value v) {
    auto e = make(expr::kind::literal);
    e->literal = std::move(v);
    return e;
  }
  static expr_ptr binary(std::string op, expr_ptr a, expr_ptr b) {
    auto e = make(expr::kind::binary, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  expr_ptr or_expr() {
    auto e = and_expr();
    while (at_name("or")) {
      ++p_;
      e = binary("or", std::move(e), and_expr());
    }
    return e;
  }
  expr_ptr and_expr() {
    auto e = not_expr();
    while (at_name("and")) {
      ++p_;
      e = binary("and", std::move(e), not_expr());
    }
    return e;
  }
  expr_ptr not_expr() {
    nesting_guard guard(depth_);
    if (at_name("not")) {
      ++p_;
      auto e = make(expr::kind::unary, "not");
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  expr_ptr compare() {
    auto e = math1();
    for (;;) {
      std::string op;
      if (peek().k == token::kind::op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                          peek().text == ">" || peek().text == "<=" || peek().text == ">="))
        op = next().text;
      else if (at_name("in"))
        op = next().text;
      else if (at_name("not") && peek(1).k == token::kind::name && peek(1).text == "in") {
        p_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), math1());
    }
  }
  expr_ptr math1() {
    auto e = concat();
    while (at_op("+") || at_op("-")) {
      std::string op = next().text;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  expr_ptr concat() {
    auto e = math2();
    while (at_op("~")) {
      ++p_;
      e = binary("~", std::move(e), math2());
    }
    return e;
  }
  expr_ptr math2() {
    auto e = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      std::string op = next().text;
      if (op == "/") fail("'/' (floating-point division) is not supported");
      e = binary(op, std::move(e), power());
    }
    return e;
  }
  expr_ptr power() {
    if (at_op("**")) fail("'**' is not supported");
    auto e = unary(true);
    if (at_op("**")) fail("'**' is not supported");
    return e;
  }
  expr_ptr unary(bool with_filter) {
    nesting_guard guard(depth_);
    expr_ptr e;
    if (at_op("-") || at_op("+")) {
      std::string op = next().text;
      e = make(expr::kind::unary, op);
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }
  expr_ptr primary() {
    const token t = next();
    switch (t.k) {
      case token::kind::name:
        if (t.text == "true" || t.text == "True") return literal(value::boolean(true));
        if (t.text == "false" || t.text == "False") return literal(value::boolean(false));
        if (t.text == "none" || t.text == "None") return literal(value::none());
        return make(expr::kind::name, t.text);
      case token::kind::string: {
        std::string s = t.text;
        while (peek().k == token::kind::string) s += next().text;
        return literal(value::string(s));
      }
      case token::kind::integer: return literal(value::integer(t.number));
      case token::kind::op:
        if (t.text == "(") {
          if (at_op(")")) {
            ++p_;
            return make(expr::kind::list);
          }
          auto e = expression();
          if (at_op(",")) {  // a tuple: a list here
            auto l = make(expr::kind::list);
            l->args.push_back(std::move(e));
            while (at_op(",")) {
              ++p_;
              if (at_op(")")) break;
              l->args.push_back(expression());
            }
            e = std::move(l);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto l = make(expr::kind::list);
          while (!at_op("]")) {
            l->args.push_back(expression());
            if (!at_op(",")) break;
            ++p_;
          }
          expect_op("]");
          return l;
        }
        if (t.text == "{") {
          auto d = make(expr::kind::dict);
          while (!at_op("}")) {
            d->args.push_back(expression());
            expect_op(":");
            d->args.push_back(expression());
            if (!at_op(",")) break;
            ++p_;
          }
          expect_op("}");
          return d;
        }
        fail("unexpected '" + t.text + "' in an expression");
      case token::kind::end: fail("an expression ends too early");
    }
    fail("unexpected token");
  }
  void call_args(expr& e) {
    expect_op("(");
    while (!at_op(")")) {
      if (at_op("*") || at_op("**")) fail("*args and **kwargs in calls are not supported");
      if (peek().k == token::kind::name && peek(1).k == token::kind::op && peek(1).text == "=") {
        e.keywords.push_back(next().text);
        ++p_;
      } else {
        if (std::any_of(e.keywords.begin(), e.keywords.end(), [](const std::string& k) { return !k.empty(); }))
          fail("a positional argument follows a keyword argument");
        e.keywords.emplace_back();
      }
      e.args.push_back(expression());
      if (!at_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }
  expr_ptr postfix(expr_ptr e) {
    for (;;) {
      if (at_op(".")) {
        ++p_;
        const token t = next();
        if (t.k == token::kind::name) {
          auto m = make(expr::kind::member, t.text);
          m->args.push_back(std::move(e));
          e = std::move(m);
        } else if (t.k == token::kind::integer) {
          auto m = make(expr::kind::index);
          m->args.push_back(std::move(e));
          m->args.push_back(literal(value::integer(t.number)));
          e = std::move(m);
        } else {
          fail("expected a name after '.'");
        }
      } else if (at_op("[")) {
        ++p_;
        expr_ptr parts[3];
        int n = 0;
        bool is_slice = false;
        for (;;) {
          if (at_op(":")) {
            ++p_;
            is_slice = true;
            if (++n > 2) fail("a slice has at most three parts");
            continue;
          }
          if (at_op("]")) break;
          if (parts[n]) fail("malformed subscript");
          parts[n] = expression();
        }
        expect_op("]");
        if (is_slice) {
          auto s = make(expr::kind::slice);
          s->args.push_back(std::move(e));
          for (auto& p : parts) s->args.push_back(std::move(p));
          e = std::move(s);
        } else {
          if (!parts[0]) fail("empty subscript");
          auto ix = make(expr::kind::index);
          ix->args.push_back(std::move(e));
          ix->args.push_back(std::move(parts[0]));
          e = std::move(ix);
        }
      } else if (at_op("(")) {
        auto c = make(expr::kind::call);
        c->args.push_back(std::move(e));
        c->keywords.emplace_back();
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  expr_ptr filters(expr_ptr e) {
    for (;;) {
      if (at_op("|")) {
        ++p_;
        std::string name = expect_name();
        if (!known_filters.count(name)) fail("filter '" + name + "' is not supported");
        auto f = make(expr::kind::filter, name);
        f->args.push_back(std::move(e));
        f->keywords.emplace_back();
        if (at_op("(")) call_args(*f);
        e = std::move(f);
      } else if (at_name("is")) {
        ++p_;
        bool negated = false;
        if (at_name("not")) {
          ++p_;
          negated = true;
        }
        std::string name = expect_name();
        if (!known_tests.count(name)) fail("test '" + name + "' is not supported");
        const token& a = peek();
        const bool argument = (a.k == token::kind::name && a.text != "else" && a.text != "or" && a.text != "and") ||
                              a.k == token::kind::string || a.k == token::kind::integer || at_op("(") || at_op("[") ||
                              at_op("{");
        if (argument) fail("test '" + name + "' with an argument is not supported");
        auto t = make(expr::kind::test, name);
        t->negated = negated;
        t->args.push_back(std::move(e));
        e = std::move(t);
      } else if (at_op("(")) {
        auto c = make(expr::kind::call);
        c->args.push_back(std::move(e));
        c->keywords.emplace_back();
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  std::vector<token> t_;
  std::size_t p_ = 0;
  int depth_ = 0;
};

// ---- statements ----

class block_parser {
 public:
  explicit block_parser(std::vector<segment> s) : s_(std::move(s)) {}

  std::vector<node> parse_all() {
    std::string stop;
    auto body = parse_until({}, stop);
    return body;
  }

 private:
  // Parses nodes until a block tag whose keyword is in `ends` (returned in `stop`, its parser in end_).
  std::vector<node> parse_until(const std::set<std::string>& ends, std::string& stop) {
    nesting_guard guard(depth_);
    std::vector<node> out;
    while (i_ < s_.size()) {
      const segment& seg = s_[i_++];
      if (seg.k == segment::kind::text) {
        node n{node::kind::text, seg.body, nullptr, {}, {}, {}};
        out.push_back(std::move(n));
        continue;
      }
      expr_parser p(tokenize(seg.body));
      if (seg.k == segment::kind::output) {
        node n{node::kind::output, {}, p.expression(), {}, {}, {}};
        p.expect_end();
        out.push_back(std::move(n));
        continue;
      }
      const std::string keyword = p.expect_name();
      if (ends.count(keyword)) {
        stop = keyword;
        end_ = std::make_unique<expr_parser>(std::move(p));
        return out;
      }
      if (keyword == "if") {
        out.push_back(parse_if(p));
      } else if (keyword == "for") {
        out.push_back(parse_for(p));
      } else if (keyword == "set") {
        out.push_back(parse_set(p));
      } else if (keyword == "endif" || keyword == "endfor" || keyword == "else" || keyword == "elif") {
        fail("'" + keyword + "' without its opening tag");
      } else {
        fail("statement '" + keyword + "' is not supported");
      }
    }
    if (!ends.empty()) fail("missing '" + *ends.rbegin() + "'");
    return out;
  }

  node parse_if(expr_parser& p) {
    node n{node::kind::if_, {}, p.expression(), {}, {}, {}};
    p.expect_end();
    std::string stop;
    n.body = parse_until({"elif", "else", "endif"}, stop);
    if (stop == "elif") {
      auto cond = std::move(end_);
      n.orelse.push_back(parse_if(*cond));
    } else if (stop == "else") {
      end_->expect_end();
      n.orelse = parse_until({"endif"}, stop);
      end_->expect_end();
    } else {
      end_->expect_end();
    }
    return n;
  }

  node parse_for(expr_parser& p) {
    node n{node::kind::for_, {}, nullptr, {}, {}, {}};
    n.targets.push_back(p.expect_name());
    while (p.at_op(",")) {
      p.next();
      n.targets.push_back(p.expect_name());
    }
    if (!p.at_name("in")) fail("expected 'in' in a for loop");
    p.next();
    n.e = p.plain_expression();
    if (p.at_name("recursive")) fail("recursive for loops are not supported");
    if (!p.at_end()) fail("for loop filters ('if' after the iterable) are not supported");
    std::string stop;
    n.body = parse_until({"else", "endfor"}, stop);
    if (stop == "else") fail("for-else is not supported");
    end_->expect_end();
    return n;
  }

  node parse_set(expr_parser& p) {
    node n{node::kind::set, {}, nullptr, {}, {}, {}};
    n.targets.push_back(p.expect_name());
    if (p.at_op(".")) {
      p.next();
      n.targets.push_back(p.expect_name());
    }
    if (p.at_op(",")) fail("set with several targets is not supported");
    if (p.at_end()) fail("block set ({% set x %}...{% endset %}) is not supported");
    p.expect_op("=");
    n.e = p.expression();
    p.expect_end();
    return n;
  }

  std::vector<segment> s_;
  std::size_t i_ = 0;
  std::unique_ptr<expr_parser> end_;
  int depth_ = 0;
};

}  // namespace

std::vector<node> parse_template(const std::string& source) { return block_parser(segment_source(source)).parse_all(); }

}  // namespace dls::gpu::jinja

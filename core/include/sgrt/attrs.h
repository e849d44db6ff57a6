// Named, typed op attributes, shared by the compiler and the runtime.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sgrt {

// Which of an attribute's values is meant; values equal sg.fbs's AttrKind.
enum class AttrKind : uint8_t { unset = 0, i, f, ints };

struct Attr {
  std::string name;
  AttrKind kind = AttrKind::unset;  // the last setter's
  int64_t i = 0;
  double f = 0.0;
  std::vector<int64_t> ints;
};

class Attrs {
 public:
  Attrs& set_i(std::string_view name, int64_t v) { return set(name, AttrKind::i, [&](Attr& a) { a.i = v; }); }
  Attrs& set_f(std::string_view name, double v) { return set(name, AttrKind::f, [&](Attr& a) { a.f = v; }); }
  Attrs& set_ints(std::string_view name, std::vector<int64_t> v) {
    return set(name, AttrKind::ints, [&](Attr& a) { a.ints = std::move(v); });
  }
  // Adds a decoded attribute as it was stored (kind unset in files before schema 2).
  void add(Attr a) { slot(a.name) = std::move(a); }

  bool has(std::string_view name) const { return find(name) != nullptr; }
  int64_t i(std::string_view name, int64_t def = 0) const { const Attr* a = find(name); return a ? a->i : def; }
  double f(std::string_view name, double def = 0.0) const { const Attr* a = find(name); return a ? a->f : def; }
  const std::vector<int64_t>& ints(std::string_view name) const {
    static const std::vector<int64_t> empty;
    const Attr* a = find(name);
    return a ? a->ints : empty;
  }
  const std::vector<Attr>& all() const { return attrs_; }

 private:
  template <class F>
  Attrs& set(std::string_view name, AttrKind kind, F&& assign) {
    Attr& a = slot(name);
    a.kind = kind;
    assign(a);
    return *this;
  }
  const Attr* find(std::string_view name) const {
    for (const Attr& a : attrs_) if (a.name == name) return &a;
    return nullptr;
  }
  Attr& slot(std::string_view name) {
    for (Attr& a : attrs_) if (a.name == name) return a;
    attrs_.emplace_back();
    attrs_.back().name = std::string(name);
    return attrs_.back();
  }
  std::vector<Attr> attrs_;
};

}  // namespace sgrt

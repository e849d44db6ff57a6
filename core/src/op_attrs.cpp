#include "sgrt/op_attrs.h"

namespace sgrt {

Status check_op_attrs(OpCode code, const Attrs& attrs) {
  std::vector<AttrDecl> decls;
  SG_TRY(op_attr_decls(code, &decls));
  std::string op(op_info(code).name);
  for (const Attr& a : attrs.all()) {
    const AttrDecl* d = nullptr;
    for (const AttrDecl& x : decls) if (x.name == a.name) d = &x;
    if (!d) return Status::Invalid("op " + op + ": unknown attribute '" + a.name + "' (declared: " +
                                   (decls.empty() ? std::string("none") : std::string(op_info(code).attrs)) + ")");
    if (a.kind != AttrKind::unset && a.kind != d->kind)
      return Status::Invalid("op " + op + ": attribute '" + a.name + "' is " + attr_kind_name(a.kind) + ", declared " +
                             attr_kind_name(d->kind));
  }
  for (const AttrDecl& d : decls)
    if (d.required && !attrs.has(d.name)) return Status::Invalid("op " + op + ": missing attribute '" + d.name + "'");
  return Status::Ok();
}

}  // namespace sgrt

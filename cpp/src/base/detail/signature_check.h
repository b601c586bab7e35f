// Compile-time comparison of a hand-declared function table (a library loaded with dlopen) against the
// library's own headers: signatures are compared after normalising what may legitimately differ, namely
// enums (declared as int) and pointers to the library's opaque structs (declared as void*).
#pragma once

#include <type_traits>

namespace chute::detail::abi {

template <class T>
struct Norm {
  using type = T;
};
template <class T>
requires std::is_enum_v<T>
struct Norm<T> {
  using type = int;
};
template <class T>
requires(std::is_class_v<T> || std::is_void_v<T> || std::is_union_v<T>) struct Norm<T*> {
  using type = void*;
};
template <class T>
requires(!std::is_class_v<T> && !std::is_void_v<T> && !std::is_union_v<T>) struct Norm<T*> {
  using type = typename Norm<T>::type*;
};
template <class T>
using norm_t = typename Norm<T>::type;

template <class F>
struct Sig;
template <class R, class... A>
struct Sig<R (*)(A...)> {
  using type = norm_t<R> (*)(norm_t<A>...);
};
template <class R, class... A>
struct Sig<R (*)(A..., ...)> {
  using type = norm_t<R> (*)(norm_t<A>..., ...);
};
// The normalised type of a function pointer: equal for the library's declaration and the table's.
template <class F>
using sig_t = typename Sig<F>::type;

}  // namespace chute::detail::abi

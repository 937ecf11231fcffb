#provides strides
// How many of begin, begin + stride, begin + 2 stride, ... lie below end (stride >= 1):
// the trip count of a strided walk whose end is known only at run time, written
// `for (var n = 0u; n < strides(begin, end, stride); n++) { let x = begin + n * stride; }`.
// The loop rule (src/gpu/loops.rs) proves such a loop ends; `x += stride` towards a
// run-time end could wrap past u32's largest value, and the rule refuses it.
fn strides(begin: u32, end: u32, stride: u32) -> u32 {
    if begin >= end {
        return 0u;
    }
    let span = end - begin;
    return span / stride + select(0u, 1u, span % stride != 0u);
}

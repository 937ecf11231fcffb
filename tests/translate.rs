use deltatape::dtype::DType;
use deltatape::gpu::kernel::{representative_keys, GdnDtypes, Op, Reduction};
use deltatape::gpu::translate::{translate, Target};

#[test]
fn scratch() {
    for op in Op::ALL {
        for red in [Reduction::Subgroup, Reduction::Workgroup] {
            for dt in DType::ALL {
                let dts = GdnDtypes {
                    act: dt,
                    state: dt,
                    tape: dt,
                };
                for key in representative_keys(op, dts, red) {
                    for t in [Target::Msl, Target::SpirV, Target::Hlsl] {
                        if let Err(e) = translate(&key, t) {
                            panic!("{e}\n{}", key.source());
                        }
                    }
                }
            }
        }
    }
}

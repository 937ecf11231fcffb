//! Faults on the GPU come back as errors: a failed allocation, a destroyed device.

mod common;
use common::*;
use deltatape::{Backend, Error, GdnShape, GqaLayout, Rollback};

#[test]
fn allocation_past_the_device_limit_is_an_error() {
    let Some(g) = gpu() else { return };
    // One layer's state at the real shape is 2 MiB per sequence: take enough
    // sequences to pass the device's max_buffer_size (2 GiB on lavapipe).
    let max = g.limits().max_buffer_size;
    let batch = (max / (2 << 20) + 1) as usize;
    let shape = GdnShape::new(batch, 1, 16, 32, 128, 128).unwrap();
    assert!(
        (shape.state_len() as u64 * 4) > max,
        "pick a bigger shape for this adapter ({max} bytes)"
    );
    match Rollback::<f32, f32, f32>::new(&Backend::Gpu(g.clone()), shape, 1, GqaLayout::Blocked) {
        Err(Error::Gpu {
            op: "rollback",
            message,
        }) => assert!(!message.is_empty()),
        Err(other) => panic!("expected Error::Gpu, got {other}"),
        Ok(_) => panic!("a buffer past the device's limit of {max} bytes was created"),
    }
    // The backend still works afterwards.
    let small = GdnShape::new(1, 2, 1, 1, 4, 2).unwrap();
    let (d, t) = draw_f32(&small, 1);
    let r = record_f32(&g, &small, &t, &d.state).unwrap();
    assert_eq!(r.state.len(), small.state_len());
}

#[test]
fn a_destroyed_device_gives_an_error_not_a_hang() {
    let Some(g) = gpu() else { return };
    let shape = GdnShape::new(2, 3, 1, 2, 8, 4).unwrap();
    let (d, t) = draw_f32(&shape, 2);
    // Works before...
    record_f32(&g, &shape, &t, &d.state).unwrap();
    g.device().destroy();
    let start = std::time::Instant::now();
    let r = record_f32(&g, &shape, &t, &d.state);
    assert!(matches!(r, Err(Error::Gpu { .. })), "{r:?}");
    assert!(start.elapsed().as_secs() < 30, "took {:?}", start.elapsed());
    let r = g.repeat(&shape.tape_k_repeat(), GqaLayout::Blocked, &t.k);
    assert!(matches!(r, Err(Error::Gpu { .. })), "{r:?}");
}

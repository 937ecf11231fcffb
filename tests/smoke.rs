mod common;
use common::*;
use deltatape::*;

#[test]
fn smoke() {
    let g = gpu().unwrap();
    println!("{}", g.describe());
    let shape = GdnShape::new(2, 3, 2, 4, 64, 16).unwrap();
    let d = draw(&shape, 1);
    let t = d.typed::<f32>();
    let m = mask(&shape, 1);
    for mk in [None, Some(&m[..])] {
        let c: Recorded<f32, f32, f32> = cpu()
            .record(&shape, GqaLayout::Blocked, &t.inputs(mk), &d.state)
            .unwrap();
        let gg: Recorded<f32, f32, f32> = g
            .record(&shape, GqaLayout::Blocked, &t.inputs(mk), &d.state)
            .unwrap();
        println!(
            "y {:e} s {:e} d {:e}",
            rel_err(&gg.y, &c.y),
            rel_err(&gg.state, &c.state),
            rel_err(&gg.delta, &c.delta)
        );
    }
}

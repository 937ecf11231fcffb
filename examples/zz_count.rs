fn main() {
    let keys = deltatape::internals::all_variants();
    let mut labels: Vec<String> = keys.iter().map(|k| k.label()).collect();
    labels.sort();
    labels.dedup();
    println!("{} {}", keys.len(), labels.len());
    for l in labels {
        eprintln!("{l}");
    }
}

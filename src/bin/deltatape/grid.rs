//! The batch and draft-length flags `bench` and `tune` share: the grid of shapes they
//! measure.

#[derive(clap::Args)]
pub struct GridArgs {
    /// Batch sizes (B), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64,256")]
    pub batches: Vec<usize>,
    /// Draft lengths (T), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    pub steps: Vec<usize>,
}

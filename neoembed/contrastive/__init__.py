"""InfoNCE fine-tuning of any encoder into a sentence embedder, and its export as a sentence-transformers
directory: typed recipe settings, the loss, the homogeneous batch sampler, the trainer and the export."""

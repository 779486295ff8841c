"""Contrastive data: manifests, source readers, normalisation, dedup, hard-negative mining, dataset build."""

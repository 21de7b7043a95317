"""Running seed_rl beyond one machine: cluster specs (Vertex AI), job specs.

Standard library only: actors import `cluster_spec`, and building a Vertex AI
job spec (`vertex --dry_run`) needs neither TensorFlow nor Google's SDKs.
"""

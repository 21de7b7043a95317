"""What Vertex AI puts in a CustomJob replica's CLUSTER_SPEC: the learner
pool and two actors, as seen by actor 1."""

SAMPLE_CLUSTER_SPEC = {
  "cluster": {
    "workerpool0": ["cmle-training-workerpool0-ab12cd-0:2222"],
    "workerpool1": [
      "cmle-training-workerpool1-ab12cd-0:2222",
      "cmle-training-workerpool1-ab12cd-1:2222",
    ],
  },
  "environment": "cloud",
  "task": {"type": "workerpool1", "index": 1, "trial": ""},
  "job": "{}",
}

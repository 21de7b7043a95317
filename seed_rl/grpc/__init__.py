"""The actor <-> learner wire protocol over gRPC (see README.md in this folder).

server.LearnerServer runs in the learner; client.ActorClient in each actor.
"""

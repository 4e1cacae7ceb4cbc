"""Inside one worker process: the actor, the user's context, its checkpoints.

Nothing here imports the driver: what a worker tells the driver travels as
the types of ``raytf.messages``, drained by the driver's polls.
"""

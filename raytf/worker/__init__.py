"""Inside one worker process: the actor, the rank host, the user's context and loop API.

``fit/`` holds Keras's own ``model.fit`` support, ``process/`` the process's
set-up; the checkpoints a rank takes are ``raytf.checkpoint``'s.

Nothing here imports the driver: what a worker tells the driver travels as
the types of ``raytf.messages``, drained by the driver's polls.
"""

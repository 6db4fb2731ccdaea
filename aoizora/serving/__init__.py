"""The serving simulator behind ``aoizora serve`` (docs/serving.md): request rates
(:mod:`.rates`), prices (:mod:`.prices`), requests and traces (:mod:`.requests`), what a
replica takes per request (:mod:`.service`), the SimPy simulation (:mod:`.simulator`), its
statistics (:mod:`.stats`), queueing theory's closed forms (:mod:`.theory`), the sizing
question (:mod:`.sizing`), the table and JSON (:mod:`.report`) and latency CDFs
(:mod:`.plots`). Nothing is imported here, so the command line checks its input before
jax starts."""

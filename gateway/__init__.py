"""The fleet gateway: an HTTP front door that routes /v1/score to the fleet's scoring servers by
the load each reports on /get_load (power of two choices), and holds requests while none is ready."""

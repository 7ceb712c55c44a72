"""What the scoring server, the fleet gateway and the operator share: facts.py, standard library only."""

"""Work a node does besides serving calls: its membership of the cluster, the
upkeep lease, and the upkeep only the leader does (README "Workers and nodes")."""

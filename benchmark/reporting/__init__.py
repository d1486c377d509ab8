"""Reporting: leaderboard, statistics, HTML report, speed."""

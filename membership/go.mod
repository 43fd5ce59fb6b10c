module github.com/maglevlb/maglev/membership

go 1.26.0

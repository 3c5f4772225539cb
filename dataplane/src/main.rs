fn main() {
    println!("xbr");
}
